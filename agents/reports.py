"""What a script reports (`job.report(loss=...)`): each value checked when it is reported
(a value that cannot be kept raises there, naming it), kept as given (a tensor stays on its
device, unread) until a flush every few seconds and at each checkpoint, which appends the
rows to `<output dir>/metrics.jsonl` and, under a daemon, sends them over the link. Rank 0's
are kept: one series per job.
"""

import json
import math
import operator
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, SupportsIndex

import numpy as np
import torch

from agents.control import Control
from agents.environment import Say

METRICS_FLUSH_S = 5.0


@dataclass
class Metrics:
    """Reported values, kept as given (tensors stay on their device) until a flush, which
    appends them to `path` and, under a daemon, sends them over the link."""

    path: Path
    control: Control | None = None
    pending: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    flushed_at: float = field(default_factory=time.monotonic)

    def add(self, step: int, values: dict[str, Any]) -> None:
        self.pending.append((step, values))

    def flush(self) -> None:
        if not self.pending:
            return
        rows = [(step, numbers(values)) for step, values in self.pending]
        lines = [json.dumps({"step": step, **readable(values)}) for step, values in rows]
        with self.path.open("a") as handle:  # in the output folder `Job` made
            handle.write("\n".join(lines) + "\n")
        if self.control is not None:
            self.control.report(rows)
        self.pending.clear()
        self.flushed_at = time.monotonic()


class Reports:
    """The steps reports are recorded at, and the values they keep: a script's own `step`,
    else the job's step count, else (a script with neither) its `report` calls counted."""

    def __init__(self, metrics: Metrics, say: Say, count: int = 0) -> None:
        self.metrics = metrics
        self.count = count  # the step of the last report, in a script with no job.loader
        self._not_series: set[str] = set()  # reported names that are not numbers, said once
        self._say = say

    def record(
        self,
        step: SupportsIndex | None,
        metrics: Mapping[str, Any],
        *,
        counted: int | None,
        at_once: bool,
        flush_due: bool,
    ) -> None:
        """Keep `metrics` at their step; flush them `at_once` (after training, no batch
        boundary comes to), or, with `flush_due` (no loader's boundary flushes them), when
        the last flush is old enough."""
        values = {name: self.reportable(name, value) for name, value in metrics.items()}
        self.metrics.add(self.step_for(step, counted), values)
        if at_once or (flush_due and time.monotonic() - self.metrics.flushed_at >= METRICS_FLUSH_S):
            self.metrics.flush()

    def step_for(self, step: SupportsIndex | None, counted: int | None) -> int:
        """The step a `report` records at: `step` when given, else the loaders' (or
        `job.steps`') count (`counted`, None when none counts), else one more than the
        last report's."""
        if step is not None:
            try:  # an int, a NumPy integer or a 0-d integer tensor (a `global_step`)
                given = operator.index(step)
            except TypeError:
                given = -1
            if isinstance(step, bool) or given < 0:
                raise ValueError(f"job.report(step=...): a whole number >= 0, got {step!r}")
            self.count = max(self.count, given)
            return given
        if counted is not None:
            return counted
        self.count += 1
        if self.count == 1:
            self._say(
                "job.report: no job.loader counts this script's steps, so each report() call"
                " counts as one (give job.report(step=N, ...) to say which)"
            )
        return self.count

    def reportable(self, name: str, value: Any) -> Any:
        """`value` as the metrics keep it, or a TypeError or ValueError naming it."""
        if isinstance(value, torch.Tensor):
            if value.numel() != 1:
                raise ValueError(
                    f"job.report({name}=...): a tensor of {value.numel()} elements; report one"
                    f" number, {name}.mean() say"
                )
            return value.detach()
        if isinstance(value, np.generic):  # np.float32(...): not a float to JSON
            return self.reportable(name, value.item())
        if isinstance(value, int | float):
            return value
        try:
            json.dumps(value)
        except (TypeError, ValueError):
            raise TypeError(
                f"job.report({name}=...): a {type(value).__name__} cannot be written to"
                " metrics.jsonl; report a number (or a string)"
            ) from None
        if name not in self._not_series:
            self._not_series.add(name)
            self._say(
                f"job.report({name}=...): a {type(value).__name__} goes to metrics.jsonl but"
                " makes no series (the daemon keeps numbers and one-element tensors)"
            )
        return value


def numbers(values: Mapping[str, Any]) -> dict[str, Any]:
    """Tensors read as Python numbers (one device sync for all tensors of a step); other
    values as given."""
    tensors = [name for name, value in values.items() if isinstance(value, torch.Tensor)]
    result = {name: value for name, value in values.items() if name not in tensors}
    if tensors:
        read = torch.stack([values[name].float().reshape(()) for name in tensors]).tolist()
        result.update(zip(tensors, read, strict=True))
    return result


def readable(values: Mapping[str, Any]) -> dict[str, Any]:
    """Values strict JSON can carry: a NaN or infinite loss as the string "nan" or "inf"."""
    return {
        name: (value if not isinstance(value, float) or math.isfinite(value) else str(value))
        for name, value in values.items()
    }
