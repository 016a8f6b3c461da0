"""The loading-rate model: formula 7 with a learned contention curve.

One pipeline p alone on the node with D loader processes loads
    samples/s = load_rate * b = K(D) / c_p
where c_p is one worker's contention-free cost per sample (seconds) and K(D) the node's
capacity in worker-equivalents (see `tpm.contention`), shared by every pipeline.

Segmented regression: every breakpoint placement on a grid (each observed D and the
half-way points between them, plus "no such knee") is scored with its best slope s2 and
per-pipeline costs, minimising squared relative error (loading noise is multiplicative).
The curve with the lowest BIC (each knee charged as two parameters) wins, so a second or
third stage appears only when the samples support it; its knees are then refined on a
finer local grid.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np

from tpm.arrays import FloatArray, IndexArray
from tpm.contention import ContentionFit
from tpm.errors import SampleError, UnknownPipeline
from tpm.fields import Fields
from tpm.samples import LOADING_TARGET, LoadingSamples
from tpm.segments import Breakpoints, SegmentStats, search_breakpoints
from tpm.validation import held_out_predictions, plan_validation, r_squared

logger = logging.getLogger(__name__)


MIN_LOADING_SAMPLES = 8
MIN_SAMPLES_PER_PIPELINE = 2


@dataclass(frozen=True)
class LoadingModel:
    """The node's contention curve and each pipeline's contention-free sample cost."""

    curve: ContentionFit
    sample_cost_s: tuple[tuple[str, float], ...]  # (pipeline, c_p) sorted by pipeline

    def cost(self, pipeline: str) -> float:
        """c_p in seconds per sample for one worker; raises UnknownPipeline."""
        for name, cost in self.sample_cost_s:
            if name == pipeline:
                return cost
        raise UnknownPipeline(pipeline, (name for name, _ in self.sample_cost_s))

    def predict(self, samples: LoadingSamples) -> FloatArray:
        """load_rate (mini-batches per second) per sample: K(D) / (c_p * b)."""
        known = dict(self.sample_cost_s)
        unknown = sorted(set(samples.pipeline) - set(known))
        if unknown:
            raise UnknownPipeline(unknown[0], known)
        costs = np.array([known[p] for p in samples.pipeline], dtype=np.float64)
        capacity = np.array([self.curve.capacity(float(d)) for d in samples.workers])
        result: FloatArray = capacity / (costs * samples.batch_size)
        return result

    def to_dict(self) -> dict[str, object]:
        """The curve and the per-pipeline costs."""
        return {"contention": self.curve.to_dict(), "sample_cost_s": dict(self.sample_cost_s)}

    @classmethod
    def from_fields(cls, fields: Fields) -> LoadingModel:
        """Rebuild from `to_dict` output."""
        costs = fields.number_map("sample_cost_s")
        if not costs or not all(math.isfinite(c) and c > 0 for c in costs.values()):
            raise fields.invalid("sample_cost_s", "a non-empty map of positive costs")
        return cls(
            curve=ContentionFit.from_fields(fields.child("contention")),
            sample_cost_s=tuple(sorted(costs.items())),
        )


@dataclass(frozen=True)
class LoadingFit:
    """A fitted loading model and its report."""

    model: LoadingModel
    report: dict[str, object]


def fit_loading(samples: LoadingSamples, *, seed: int = 0) -> LoadingFit:
    """Learn the contention curve and sample costs; report held-out R^2 of load_rate.

    `seed` fixes the validation shuffle. Raises SampleError when the samples lack load
    rates, are fewer than `MIN_LOADING_SAMPLES`, or a pipeline has fewer than
    `MIN_SAMPLES_PER_PIPELINE`.
    """
    load_rate = _targets(samples)
    plan = plan_validation(len(samples), seed, groups=samples.pipeline)

    def fit_predict(train: IndexArray, test: IndexArray) -> FloatArray:
        return _fit_model(samples.subset(train)).predict(samples.subset(test))

    held_out, predicted = held_out_predictions(plan, fit_predict)
    r2 = r_squared(load_rate[held_out], predicted)
    model = _fit_model(samples)
    curve = model.curve
    logger.info("loading model: %d-stage curve %s, held-out R^2 %s", curve.stages, curve, r2)
    report: dict[str, object] = {
        "r2": r2,
        "validation": plan.name,
        "samples": len(samples),
        "stages": curve.stages,
        "breakpoints": [curve.contention_from, curve.saturation_from],
        "stage_slopes": curve.stage_slopes(),
        "pipelines": dict(model.sample_cost_s),
        "contention": [list(point) for point in curve.points()],
    }
    return LoadingFit(model=model, report=report)


def _targets(samples: LoadingSamples) -> FloatArray:
    if samples.load_rate is None:
        raise SampleError(
            samples.source,
            "no measured load rates; fitting needs the target column",
            column=LOADING_TARGET,
        )
    if len(samples) < MIN_LOADING_SAMPLES:
        raise SampleError(
            samples.source,
            f"{len(samples)} loading samples, but fitting needs at least "
            f"{MIN_LOADING_SAMPLES}; add rows",
        )
    for pipeline in sorted(set(samples.pipeline)):
        count = samples.pipeline.count(pipeline)
        if count < MIN_SAMPLES_PER_PIPELINE:
            raise SampleError(
                samples.source,
                f"pipeline {pipeline!r} has {count} sample, but each pipeline needs at "
                f"least {MIN_SAMPLES_PER_PIPELINE}; add rows for it",
                column="pipeline",
            )
    return samples.load_rate


def _fit_model(samples: LoadingSamples) -> LoadingModel:
    """Segmented regression on `samples` (which have load rates)."""
    assert samples.load_rate is not None
    pipelines = sorted(set(samples.pipeline))
    pipeline_index = np.array([pipelines.index(p) for p in samples.pipeline], dtype=np.intp)
    stats = SegmentStats.from_samples(
        pipeline_index, len(pipelines), samples.workers, samples.load_rate * samples.batch_size
    )
    found: Breakpoints = search_breakpoints(stats)
    curve = ContentionFit(
        contention_from=found.contention_from,
        saturation_from=found.saturation_from,
        contention_slope=found.contention_slope,
        observed_max_workers=float(stats.levels[-1]),
    )
    speeds = found.speeds  # 1 / c_p per pipeline, samples per second per worker
    return LoadingModel(
        curve=curve,
        sample_cost_s=tuple((p, 1.0 / float(speeds[i])) for i, p in enumerate(pipelines)),
    )
