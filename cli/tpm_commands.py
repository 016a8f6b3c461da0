"""`stoker tpm fit` and `stoker tpm predict`: the throughput model from the command line.

This module does the file I/O and the timing; `tpm` itself only sees text. A model file is
written to a temporary file in its directory and renamed into place, so a crash or a
full disk never leaves half a model where a good one was.
"""

import time
from pathlib import Path
from typing import Annotated

import typer

from cli.common import fail, print_json, read_text, write_atomically
from tpm import (
    FittedTPM,
    TpmError,
    TrainingSamples,
    UnknownPipeline,
    fit,
    import_fitting_backend,
    read_loading_samples,
    read_samples,
    read_training_samples,
)

tpm_app = typer.Typer(
    help="Fit the throughput prediction model on sample files, or predict with one.",
    no_args_is_help=True,
)


@tpm_app.command("fit")
def fit_command(
    train: Annotated[
        Path, typer.Argument(metavar="TRAIN.csv", help="training samples (step times)")
    ],
    load: Annotated[Path, typer.Argument(metavar="LOAD.csv", help="loading samples (rates)")],
    out: Annotated[Path, typer.Option("--out", metavar="MODEL.json", help="model to write")],
    seed: Annotated[int, typer.Option(help="seed of the validation shuffle and the forest")] = 0,
) -> None:
    """Fit both halves of the model, write it to --out, print the fit report as JSON."""
    try:
        training = read_training_samples(read_text(train, "training samples"), str(train))
        loading = read_loading_samples(read_text(load, "loading samples"), str(load))
        # fit_seconds is the fitting alone, as in a long-running daemon, not the import.
        import_fitting_backend()
        started = time.perf_counter()
        result = fit(training, loading, seed=seed)
        fit_seconds = time.perf_counter() - started
    except TpmError as error:
        fail(str(error))
    write_atomically(out, result.model.to_json(), "model")
    print_json({**result.report, "fit_seconds": fit_seconds, "model": str(out)})


@tpm_app.command("predict")
def predict_command(
    model: Annotated[Path, typer.Argument(metavar="MODEL.json", help="a fitted model")],
    samples: Annotated[
        Path, typer.Argument(metavar="SAMPLES.csv", help="training or loading samples")
    ],
) -> None:
    """Print predicted step_time_s or load_rate for each row of SAMPLES.csv, in row order."""
    try:
        fitted = FittedTPM.from_json(read_text(model, "TPM model"), str(model))
        data = read_samples(read_text(samples, "samples"), str(samples), require_target=False)
        if isinstance(data, TrainingSamples):
            print_json({"step_time_s": fitted.predict_training(data).tolist()})
        else:
            print_json({"load_rate": fitted.predict_loading(data).tolist()})
    except UnknownPipeline as error:
        fail(f"{samples}: column pipeline: {error}")
    except TpmError as error:
        fail(str(error))
