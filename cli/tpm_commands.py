"""`stoker tpm fit`, `predict` and `upload`: the throughput model from the command line.

This module does the file I/O and the timing; `tpm` itself only sees text. A model file is
written to a temporary file in its directory and renamed into place, so a crash or a
full disk never leaves half a model where a good one was. `upload` sends a sample file to
a live daemon (`POST /v1/tpm/samples`), which refits on it.
"""

import csv
import io
import time
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from cli.common import fail, print_json, read_text, write_atomically
from cli.connection import Daemon, StateDir, Token, Url

tpm_app = typer.Typer(
    help="Fit the throughput prediction model on sample files, predict with one, or give "
    "samples to a live daemon.",
    no_args_is_help=True,
)
# A request's CSV stays under this many bytes, well inside the daemon's default 64 KiB body
# limit (max_body_bytes): a longer file goes in several requests of whole rows.
UPLOAD_CHUNK_BYTES = 48 * 1024


class SampleKind(StrEnum):
    training = "training"
    loading = "loading"


@tpm_app.command("fit")
def fit_command(
    train: Annotated[
        Path, typer.Argument(metavar="TRAIN.csv", help="training samples (step times)")
    ],
    load: Annotated[Path, typer.Argument(metavar="LOAD.csv", help="loading samples (rates)")],
    out: Annotated[Path, typer.Option("--out", metavar="MODEL.json", help="model to write")],
    seed: Annotated[
        int, typer.Option(min=0, help="seed of the validation shuffle and the forest")
    ] = 0,
) -> None:
    """Fit both halves of the model, write it to --out, print the fit report as JSON."""
    from tpm import (  # noqa: PLC0415 (the CLI imports lazily)
        TpmError,
        fit,
        import_fitting_backend,
        read_loading_samples,
        read_training_samples,
    )

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
    from tpm import (  # noqa: PLC0415 (the CLI imports lazily)
        FittedTPM,
        TpmError,
        TrainingSamples,
        UnknownPipeline,
        read_samples,
    )

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


@tpm_app.command("upload")
def upload_command(
    samples: Annotated[
        Path, typer.Argument(metavar="FILE.csv", help="training or loading samples")
    ],
    *,
    kind: Annotated[
        SampleKind | None, typer.Option(help="the file's kind (default: judged from its header)")
    ] = None,
    url: Url = None,
    token: Token = None,
    state_dir: StateDir = None,
) -> None:
    """Give profiled samples to a live daemon (admin token); it refits on them every
    tpm_refit_s, or at once on POST /v1/tpm/fit. The file is checked here first, as
    `stoker tpm fit` checks it. Prints the daemon's stored sample counts as JSON."""
    from tpm import (  # noqa: PLC0415 (the CLI imports lazily)
        TpmError,
        detect_kind,
        read_loading_samples,
        read_training_samples,
    )

    text = read_text(samples, "samples")
    try:
        judged = kind.value if kind is not None else detect_kind(text, str(samples))
        if judged == "training":
            read_training_samples(text, str(samples))
        else:
            read_loading_samples(text, str(samples))
    except TpmError as error:
        fail(str(error))
    daemon = Daemon(url, token, state_dir)
    replies = [
        daemon.call(
            "POST", "/v1/tpm/samples", {"kind": judged, "csv": part, "source": samples.name}
        )
        for part in _chunks(text, UPLOAD_CHUNK_BYTES)
    ]
    added = sum(reply["added"] for reply in replies)
    print_json({"kind": judged, "added": added, "samples": replies[-1]["samples"]})


def _chunks(text: str, limit: int) -> list[str]:
    """`text` as CSV files of whole rows, each with the header, each under `limit` bytes
    when it can be (a row longer than that goes alone)."""
    rows = [row for row in csv.reader(io.StringIO(text.removeprefix("\ufeff"))) if any(row)]
    header, parts, current, size = rows[0], [], [rows[0]], 0
    for row in rows[1:]:
        line = _csv_text([row])
        if len(current) > 1 and size + len(line.encode()) > limit:
            parts.append(_csv_text(current))
            current, size = [header], 0
        current.append(row)
        size += len(line.encode())
    parts.append(_csv_text(current))
    return parts


def _csv_text(rows: list[list[str]]) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue()
