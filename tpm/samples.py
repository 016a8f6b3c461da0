"""Sample sets and the CSV files they come from.

Two kinds of samples feed the model (column names are the contract in DESIGN.md):

- training samples, one per measured configuration: `batch_size` (per GPU, b), `flops`
  (forward FLOPs per sample, f), `model_params` (M), `gpus` (n) and the target
  `step_time_s` (1/mu);
- loading samples, one job alone on the node: `pipeline` (id of the preprocessing
  pipeline), `batch_size` (b), `workers` (loader processes on the node, D) and the target
  `load_rate` (mini-batches per second).

Parsing takes the file's text, never a path, and raises `SampleError` naming the source,
the data row (1-based, header not counted) and the column of the first problem found.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Literal

import numpy as np

from tpm.arrays import FloatArray, IndexArray, frozen_floats
from tpm.errors import SampleError

TRAINING_FEATURES = ("batch_size", "flops", "model_params", "gpus")
TRAINING_TARGET = "step_time_s"
LOADING_FEATURES = ("pipeline", "batch_size", "workers")
LOADING_TARGET = "load_rate"


class _Cell(Enum):
    """How a column's cells are read."""

    POSITIVE = "a positive number"
    COUNT = "a positive whole number"
    TEXT = "a non-empty id"


# What each column means, to say in messages what a value should be.
_MEANING: dict[str, tuple[_Cell, str]] = {
    "batch_size": (_Cell.POSITIVE, "the mini-batch size per GPU"),
    "flops": (_Cell.POSITIVE, "the forward FLOPs per sample"),
    "model_params": (_Cell.POSITIVE, "the number of model parameters"),
    "gpus": (_Cell.COUNT, "the number of GPUs"),
    "step_time_s": (_Cell.POSITIVE, "the training step time in seconds"),
    "pipeline": (_Cell.TEXT, "the preprocessing pipeline id"),
    "workers": (_Cell.COUNT, "the number of loader processes on the node"),
    "load_rate": (_Cell.POSITIVE, "the mini-batches loaded per second"),
}


def _column(values: object) -> FloatArray:
    array = frozen_floats(values)
    if array.ndim != 1:
        raise ValueError(f"sample columns are one-dimensional, got shape {array.shape}")
    return array


@dataclass(frozen=True, eq=False)
class TrainingSamples:
    """Measured training steps; `step_time_s` is None when the file had no target."""

    source: str
    batch_size: FloatArray
    flops: FloatArray
    model_params: FloatArray
    gpus: FloatArray
    step_time_s: FloatArray | None = None

    def __post_init__(self) -> None:
        for name in (*TRAINING_FEATURES, TRAINING_TARGET):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, _column(value))
        _check_lengths(self.source, [getattr(self, n) for n in TRAINING_FEATURES])
        if self.step_time_s is not None:
            _check_lengths(self.source, [self.batch_size, self.step_time_s])

    def __len__(self) -> int:
        return int(self.batch_size.shape[0])

    def subset(self, indices: IndexArray) -> TrainingSamples:
        """The samples at `indices`, in that order."""
        return TrainingSamples(
            source=self.source,
            batch_size=self.batch_size[indices],
            flops=self.flops[indices],
            model_params=self.model_params[indices],
            gpus=self.gpus[indices],
            step_time_s=None if self.step_time_s is None else self.step_time_s[indices],
        )


@dataclass(frozen=True, eq=False)
class LoadingSamples:
    """Measured loading rates; `load_rate` is None when the file had no target."""

    source: str
    pipeline: tuple[str, ...]
    batch_size: FloatArray
    workers: FloatArray
    load_rate: FloatArray | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "pipeline", tuple(self.pipeline))
        for name in ("batch_size", "workers", "load_rate"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, _column(value))
        columns = [self.batch_size, self.workers]
        if self.load_rate is not None:
            columns.append(self.load_rate)
        _check_lengths(self.source, columns)
        if len(self.pipeline) != len(self):
            raise ValueError(f"{self.source}: pipeline ids and values differ in length")

    def __len__(self) -> int:
        return int(self.batch_size.shape[0])

    def subset(self, indices: IndexArray) -> LoadingSamples:
        """The samples at `indices`, in that order."""
        return LoadingSamples(
            source=self.source,
            pipeline=tuple(self.pipeline[int(i)] for i in indices),
            batch_size=self.batch_size[indices],
            workers=self.workers[indices],
            load_rate=None if self.load_rate is None else self.load_rate[indices],
        )


def _check_lengths(source: str, columns: Sequence[FloatArray]) -> None:
    if len({column.shape[0] for column in columns}) > 1:
        raise ValueError(f"{source}: sample columns differ in length")


def read_training_samples(
    text: str, source: str, *, require_target: bool = True
) -> TrainingSamples:
    """Parse training samples from CSV `text` read from `source`.

    The target column `step_time_s` is required only when `require_target` is true;
    otherwise it is ignored like any extra column and the result has no target.
    Raises SampleError for anything the model cannot use.
    """
    table = _read_table(text, source, TRAINING_FEATURES, TRAINING_TARGET, require_target)
    return TrainingSamples(
        source=source,
        batch_size=_numbers(table, "batch_size"),
        flops=_numbers(table, "flops"),
        model_params=_numbers(table, "model_params"),
        gpus=_numbers(table, "gpus"),
        step_time_s=_numbers(table, TRAINING_TARGET) if require_target else None,
    )


def read_loading_samples(text: str, source: str, *, require_target: bool = True) -> LoadingSamples:
    """Parse loading samples from CSV `text` read from `source`.

    The target column `load_rate` is required only when `require_target` is true;
    otherwise it is ignored like any extra column and the result has no target.
    Raises SampleError for anything the model cannot use.
    """
    table = _read_table(text, source, LOADING_FEATURES, LOADING_TARGET, require_target)
    return LoadingSamples(
        source=source,
        pipeline=tuple(str(value) for value in table.values["pipeline"]),
        batch_size=_numbers(table, "batch_size"),
        workers=_numbers(table, "workers"),
        load_rate=_numbers(table, LOADING_TARGET) if require_target else None,
    )


SampleKind = Literal["training", "loading"]


def detect_kind(text: str, source: str) -> SampleKind:
    """Which kind of sample file `text` is, judged from its header.

    `pipeline` or `workers` marks a loading file, `flops` or `model_params` a training
    file; a header with markers of both kinds is judged by which kind's columns are all
    present. Raises SampleError when the header does not say.
    """
    header = _header(text, source)
    loading = {"pipeline", "workers"} & set(header)
    training = {"flops", "model_params"} & set(header)
    if loading and training:
        has_loading = set(LOADING_FEATURES) <= set(header)
        has_training = set(TRAINING_FEATURES) <= set(header)
        if has_loading != has_training:
            return "loading" if has_loading else "training"
        raise SampleError(
            source,
            "the header mixes training columns (flops, model_params) and loading columns "
            "(pipeline, workers); put each kind of sample in its own file",
        )
    if loading:
        return "loading"
    if training:
        return "training"
    raise SampleError(
        source,
        "cannot tell the kind of samples from the header; a training file names "
        f"{', '.join(TRAINING_FEATURES)}, a loading file names {', '.join(LOADING_FEATURES)}",
    )


def read_samples(
    text: str, source: str, *, require_target: bool = False
) -> TrainingSamples | LoadingSamples:
    """Parse a sample file of either kind, detected from its header (see `detect_kind`)."""
    if detect_kind(text, source) == "loading":
        return read_loading_samples(text, source, require_target=require_target)
    return read_training_samples(text, source, require_target=require_target)


@dataclass(frozen=True)
class _Table:
    """The parsed cells of the columns asked for, one tuple per column."""

    values: dict[str, tuple[float | str, ...]]


def _numbers(table: _Table, column: str) -> FloatArray:
    return np.array(table.values[column], dtype=np.float64)


def _records(text: str, source: str) -> Iterator[tuple[int, list[str]]]:
    """Yield (data row number, cells) for each non-blank record; row 0 is the header."""
    # A byte-order mark from spreadsheet exports would otherwise end up in the first name.
    reader = csv.reader(io.StringIO(text.removeprefix("\ufeff"), newline=""), strict=True)
    row = -1
    try:
        for row, record in enumerate(reader):
            if any(cell.strip() for cell in record):
                yield row, [cell.strip() for cell in record]
    except csv.Error as error:
        raise SampleError(
            source, f"not valid CSV ({error}); fix the quoting", row=row + 1 if row >= 0 else None
        ) from error


def _header(text: str, source: str) -> list[str]:
    for row, cells in _records(text, source):
        if row != 0:
            raise SampleError(
                source, "the first line is blank; the header must be the first line", row=None
            )
        seen: set[str] = set()
        for name in cells:
            if name in seen:
                raise SampleError(
                    source,
                    "appears twice in the header; keep one column of each name",
                    column=name,
                )
            seen.add(name)
        return cells
    raise SampleError(source, "the file is empty; it needs a header row and one row per sample")


def _read_table(
    text: str,
    source: str,
    features: Sequence[str],
    target: str,
    require_target: bool,
) -> _Table:
    header = _header(text, source)
    wanted = [*features, target] if require_target else list(features)
    missing = [name for name in wanted if name not in header]
    if missing:
        raise SampleError(
            source,
            f"missing column; the header must name {', '.join(wanted)} "
            f"(it names {', '.join(header) or 'nothing'})",
            column=missing[0],
        )
    positions = {name: header.index(name) for name in wanted}
    cells: dict[str, list[float | str]] = {name: [] for name in wanted}
    for row, record in _records(text, source):
        if row == 0:
            continue
        if len(record) != len(header):
            raise SampleError(
                source,
                f"has {len(record)} fields but the header has {len(header)}; "
                "give every row one value per header column",
                row=row,
            )
        for name in wanted:
            cells[name].append(_parse_cell(record[positions[name]], source, row, name))
    if not cells[wanted[0]]:
        raise SampleError(source, "no data rows; add one row per sample under the header")
    return _Table(values={name: tuple(values) for name, values in cells.items()})


def _parse_cell(cell: str, source: str, row: int, column: str) -> float | str:
    kind, meaning = _MEANING[column]
    if not cell:
        raise SampleError(
            source, f"empty value; give {meaning} as {kind.value}", row=row, column=column
        )
    if kind is _Cell.TEXT:
        return cell
    try:
        value = float(cell)
    except ValueError:
        raise SampleError(
            source,
            f"{cell!r} is not a number; give {meaning} as {kind.value}",
            row=row,
            column=column,
        ) from None
    if not math.isfinite(value):
        raise SampleError(
            source,
            f"{cell!r} is not a finite number; give {meaning} as {kind.value}",
            row=row,
            column=column,
        )
    if value <= 0:
        raise SampleError(
            source,
            f"{cell} is not positive; {meaning} must be greater than zero",
            row=row,
            column=column,
        )
    if kind is _Cell.COUNT and not value.is_integer():
        raise SampleError(
            source,
            f"{cell} is not a whole number; {meaning} must be a positive integer",
            row=row,
            column=column,
        )
    return value
