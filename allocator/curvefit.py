"""A job's measured curve as the planner's smooth knee. A profile (`stoker profile`, a
published one) gives samples/s per GPU at a few loader workers per GPU, measured with the
job alone on its GPUs; `fit_knee` finds the T = (G^-p + (d/c)^-p)^(-1/p) per GPU closest to
it in relative error, at the points and at every whole worker count up to the last (read
off the points, linear between them, through 0), so that the planner's choices below the
first point are weighed too. The simulator's `oracle` plans a job that brings its curve on
this fit (workloads/spec.py), and a request or a job may give its curve as the prior
(daemon/schemas/).
"""

import functools
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from allocator.bounds import MAX_SAMPLES_PER_S, MAX_WORKERS
from allocator.knapsack import FloatArray

MAX_POINTS = 64  # a profile's points: a few worker counts, never a trace


@dataclass(frozen=True)
class Knee:
    """A measured curve as the planner's smooth knee, T = (G^-p + (d/c)^-p)^(-1/p) per GPU."""

    sample_cost_s: float  # c: one worker's seconds per sample
    peak_samples_per_s: float  # G, per GPU
    sharpness: float  # p
    worst_error: float  # the largest |fit / measured - 1| over the points

    def step_time_s(self, batch_size: int, gpus: int) -> float:
        """1/mu for a job of global batch `batch_size` on `gpus` GPUs at this peak."""
        return batch_size / (gpus * self.peak_samples_per_s)


def curve_problem(workers_per_gpu: Sequence[float], samples_per_s: Sequence[float]) -> str | None:
    """What is wrong with a measured curve's points, said with the fix; None if nothing."""
    if len(workers_per_gpu) != len(samples_per_s):
        return (
            f"workers_per_gpu has {len(workers_per_gpu)} points and samples_per_s "
            f"{len(samples_per_s)}: give one rate per worker count"
        )
    if not 2 <= len(workers_per_gpu) <= MAX_POINTS:
        return f"give 2 to {MAX_POINTS} points, measured at different worker counts"
    increasing = all(a < b for a, b in itertools.pairwise([0.0, *workers_per_gpu]))
    if (
        not increasing
        or not math.isfinite(workers_per_gpu[-1])
        or workers_per_gpu[-1] > MAX_WORKERS
    ):
        return f"workers_per_gpu must be positive and increasing, at most {MAX_WORKERS}"
    if not all(math.isfinite(r) and 0 < r <= MAX_SAMPLES_PER_S for r in samples_per_s):
        return f"samples_per_s must be positive numbers, at most {MAX_SAMPLES_PER_S:g}"
    falls = [index for index, (a, b) in enumerate(itertools.pairwise(samples_per_s)) if b < a]
    if falls:
        at = falls[0]
        return (
            f"samples_per_s must not fall as workers grow, but falls from {samples_per_s[at]:g}"
            f" at {workers_per_gpu[at]:g} workers to {samples_per_s[at + 1]:g} at"
            f" {workers_per_gpu[at + 1]:g} (a job alone never loads slower with more"
            " workers); average repeated measurements first"
        )
    return None


@dataclass(frozen=True)
class Prior:
    """What a profile tells the planner of a job before its heartbeats do."""

    step_time_s: float
    sample_cost_s: float
    knee_sharpness: float


def profile_prior(
    workers_per_gpu: Sequence[float],
    samples_per_s: Sequence[float],
    *,
    batch_size: int,
    gpus: int,
    knee_sharpness: float | None,
) -> Prior:
    """The fit's rates for a job of global batch `batch_size` on `gpus` GPUs, and its knee's
    sharpness unless the job gives its own (`knee_sharpness` beside its profile stands)."""
    knee = fit_knee(workers_per_gpu, samples_per_s)
    return Prior(
        knee.step_time_s(batch_size, gpus), knee.sample_cost_s, knee_sharpness or knee.sharpness
    )


def fit_knee(workers_per_gpu: Sequence[float], samples_per_s: Sequence[float]) -> Knee:
    """The least-squares fit (relative errors) of the smooth knee to the points, which
    `curve_problem` found nothing wrong with (module docstring). A job's profile is read
    again for each heartbeat it sends (daemon/jobbook.py): the fit of the same points is
    made once (1.4 ms each on this host)."""
    return _fitted(tuple(map(float, workers_per_gpu)), tuple(map(float, samples_per_s)))


@functools.lru_cache(maxsize=1024)
def _fitted(workers_per_gpu: tuple[float, ...], samples_per_s: tuple[float, ...]) -> Knee:
    # scipy takes 0.3 s to import: the daemon and every `stoker` command load this module.
    from scipy.optimize import least_squares  # noqa: PLC0415

    points = np.array(workers_per_gpu, dtype=np.float64)
    measured = np.array(samples_per_s, dtype=np.float64)
    whole = np.arange(1.0, np.ceil(points[-1]) + 1.0)
    workers = np.concatenate([points, whole])
    rates = np.interp(workers, np.concatenate([[0.0], points]), np.concatenate([[0.0], measured]))

    def curve(params: FloatArray, at: FloatArray) -> FloatArray:
        per_worker, peak, power = params
        result: FloatArray = (peak**-power + (per_worker * at) ** -power) ** (-1.0 / power)
        return result

    first = measured[0] / points[0]
    top = float(measured.max())
    fit = least_squares(
        lambda params: np.log(curve(params, workers) / rates),
        np.array([first, top, 4.0]),
        bounds=([0.2 * first, 0.8 * top, 0.5], [5.0 * first, 2.0 * top, 40.0]),
    )
    per_worker, peak, power = (float(x) for x in fit.x)
    worst = float(np.max(np.abs(curve(fit.x, points) / measured - 1.0)))
    return Knee(1.0 / per_worker, peak, power, worst)
