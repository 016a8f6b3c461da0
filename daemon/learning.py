"""The daemon's side of the throughput model: samples in and out of the store as the CSV
columns `stoker tpm fit` reads, and fits on an immutable snapshot (run in a thread)."""

import csv
import io
from collections.abc import Mapping, Sequence
from typing import Literal

from tpm import (
    FitResult,
    SampleError,
    fit,
    read_loading_samples,
    read_training_samples,
)
from tpm.samples import LOADING_FEATURES, LOADING_TARGET, TRAINING_FEATURES, TRAINING_TARGET

SampleKind = Literal["training", "loading"]
COLUMNS: dict[str, tuple[str, ...]] = {
    "training": (*TRAINING_FEATURES, TRAINING_TARGET),
    "loading": (*LOADING_FEATURES, LOADING_TARGET),
}
MIN_STEP_SHARE = 0.95  # DESIGN.md: a training sample's step is at least 95 % of its iteration


def parse_samples(kind: SampleKind, text: str, source: str) -> list[dict[str, object]]:
    """The rows of an uploaded CSV, checked as `stoker tpm fit` checks them (SampleError
    names the row and column), keeping only the columns the model reads."""
    if kind == "training":
        read_training_samples(text, source)
    else:
        read_loading_samples(text, source)
    reader = csv.DictReader(io.StringIO(text))
    return [{column: row[column].strip() for column in COLUMNS[kind]} for row in reader]


def to_csv(kind: str, rows: Sequence[Mapping[str, object]]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=COLUMNS[kind], extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def fit_rows(
    training: Sequence[Mapping[str, object]], loading: Sequence[Mapping[str, object]]
) -> FitResult:
    """Fit from stored rows; SampleError says what is missing. Slow: run it in a thread."""
    if not training or not loading:
        raise SampleError(
            "stored samples",
            f"a fit needs training and loading samples; have {len(training)} and "
            f"{len(loading)}. POST /v1/tpm/samples or run `stoker profile`",
        )
    return fit(
        read_training_samples(to_csv("training", training), "stored training samples"),
        read_loading_samples(to_csv("loading", loading), "stored loading samples"),
    )


def training_row(
    *, batch_size_per_gpu: float, flops: float, model_params: float, gpus: int, step_time_s: float
) -> dict[str, object]:
    return {
        "batch_size": batch_size_per_gpu,
        "flops": flops,
        "model_params": model_params,
        "gpus": gpus,
        "step_time_s": step_time_s,
    }
