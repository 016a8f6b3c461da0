"""Breakpoint search for the piecewise-linear capacity K(D) (segmented regression).

The model: pipeline p at D workers loads s = g_p * K(D) samples/s, with g_p = 1 / c_p and
K(D) = min(D, k1) + s2 * clip(min(D, k2) - k1, 0). Residuals are relative, r = 1 - g_p *
K(D) / s, because loading noise is multiplicative.

For fixed knees (k1, k2) and slope s2, the best g_p is closed-form, and the summed
squared residual depends on the data only through a few sums per (pipeline, distinct D).
So one pass over the samples builds `SegmentStats`, and each candidate placement then
costs O(pipelines * distinct D) whatever the sample count: thousands of placements,
each with its own best s2, are scored in a few milliseconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tpm.arrays import FloatArray, IndexArray

# A knee grid finer than this many positions buys nothing but time; the local refinement
# recovers precision.
MAX_POSITIONS = 96
CHUNK = 4096
SLOPE_GRID = 33
GOLDEN_STEPS = 40
REFINE_POINTS = 21
# Residual sums below this share of the sample count are rounding noise; without a floor
# the log in BIC runs off to minus infinity on noiseless data.
SSE_FLOOR = 1e-12
# A knee's position is searched over the whole grid, which buys more fit than one ordinary
# coefficient; charging it as two keeps noise from adding stages (checked on ground-truth
# curves with 5 % noise: a sharp 2-stage knee is no longer read as 3 stages).
KNEE_PARAMETERS = 2


@dataclass(frozen=True, eq=False)
class SegmentStats:
    """Sufficient statistics of the loading samples for every breakpoint placement."""

    levels: FloatArray  # distinct worker counts D, increasing
    inverse: FloatArray  # [pipeline, level]: sum of 1/s over the samples there
    inverse_sq: FloatArray  # [pipeline, level]: sum of 1/s^2
    counts: FloatArray  # samples per pipeline
    total: int  # samples in all

    @classmethod
    def from_samples(
        cls,
        pipeline_index: IndexArray,
        pipeline_count: int,
        workers: FloatArray,
        samples_per_s: FloatArray,
    ) -> SegmentStats:
        """Accumulate the sums from per-sample pipeline index, workers and samples/s."""
        levels, level_index = np.unique(workers, return_inverse=True)
        shape = (pipeline_count, levels.shape[0])
        inverse = np.zeros(shape)
        inverse_sq = np.zeros(shape)
        np.add.at(inverse, (pipeline_index, level_index), 1.0 / samples_per_s)
        np.add.at(inverse_sq, (pipeline_index, level_index), 1.0 / samples_per_s**2)
        counts = np.bincount(pipeline_index, minlength=pipeline_count).astype(np.float64)
        return cls(levels, inverse, inverse_sq, counts, int(workers.shape[0]))


@dataclass(frozen=True)
class Breakpoints:
    """The chosen curve: knees (None where absent), slope, per-pipeline speeds g_p."""

    contention_from: float | None
    saturation_from: float | None
    contention_slope: float
    speeds: tuple[float, ...]


@dataclass(frozen=True)
class _Sums:
    """Per-candidate, per-pipeline sums: S1(s2) = a + s2*b, S2(s2) = aa + 2*s2*ab + s2^2*bb."""

    a: FloatArray
    b: FloatArray
    aa: FloatArray
    ab: FloatArray
    bb: FloatArray


def _sums(stats: SegmentStats, first: FloatArray, second: FloatArray) -> _Sums:
    """Sums for knees `first` (k1) and `second` (k2), one candidate per entry; inf = none."""
    levels = stats.levels[None, :]
    stage_one = np.minimum(levels, first[:, None])
    stage_two = np.maximum(np.minimum(levels, second[:, None]) - first[:, None], 0.0)
    return _Sums(
        a=stage_one @ stats.inverse.T,
        b=stage_two @ stats.inverse.T,
        aa=(stage_one * stage_one) @ stats.inverse_sq.T,
        ab=(stage_one * stage_two) @ stats.inverse_sq.T,
        bb=(stage_two * stage_two) @ stats.inverse_sq.T,
    )


def _sse(stats: SegmentStats, sums: _Sums, slope: FloatArray) -> FloatArray:
    """Residual sum of squares at `slope`: shape [candidate] or [candidate, trial]."""
    s = slope[..., None]

    def spread(values: FloatArray) -> FloatArray:
        # One row of sums per candidate, shared by all of its trial slopes.
        return values[:, None, :] if slope.ndim == 2 else values

    first, extra = spread(sums.a), spread(sums.b)
    aa, ab, bb = spread(sums.aa), spread(sums.ab), spread(sums.bb)
    explained = (first + s * extra) ** 2 / (aa + 2.0 * s * ab + s * s * bb)
    # Rounding can push a perfect fit a hair below zero.
    sse: FloatArray = np.maximum(stats.total - explained.sum(axis=-1), 0.0)
    return sse


def _best_slope(stats: SegmentStats, sums: _Sums) -> tuple[FloatArray, FloatArray]:
    """(sse, s2) per candidate, s2 in [0, 1]: a coarse grid, then golden section."""
    count = sums.a.shape[0]
    grid = np.linspace(0.0, 1.0, SLOPE_GRID)
    coarse = _sse(stats, sums, np.broadcast_to(grid, (count, SLOPE_GRID)))
    best = np.argmin(coarse, axis=1)
    best_slope, best_sse = grid[best], coarse[np.arange(count), best]
    # The sse is smooth in s2; bracket the grid minimum by its neighbours and narrow it.
    low = grid[np.maximum(best - 1, 0)]
    high = grid[np.minimum(best + 1, SLOPE_GRID - 1)]
    ratio = (math.sqrt(5.0) - 1.0) / 2.0
    x1, x2 = high - ratio * (high - low), low + ratio * (high - low)
    f1, f2 = _sse(stats, sums, x1), _sse(stats, sums, x2)
    for _ in range(GOLDEN_STEPS):
        left = f1 <= f2
        high = np.where(left, x2, high)
        low = np.where(left, low, x1)
        new = np.where(left, high - ratio * (high - low), low + ratio * (high - low))
        f_new = _sse(stats, sums, new)
        x1, x2, f1, f2 = (
            np.where(left, new, x2),
            np.where(left, x1, new),
            np.where(left, f_new, f2),
            np.where(left, f1, f_new),
        )
    refined = f1 < best_sse
    return np.where(refined, f1, best_sse), np.where(refined, x1, best_slope)


def _score(
    stats: SegmentStats, first: FloatArray, second: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """(sse, s2) for every candidate knee pair, in chunks to bound memory."""
    sse_parts, slope_parts = [], []
    for start in range(0, first.shape[0], CHUNK):
        sums = _sums(stats, first[start : start + CHUNK], second[start : start + CHUNK])
        sse, slope = _best_slope(stats, sums)
        sse_parts.append(sse)
        slope_parts.append(slope)
    return np.concatenate(sse_parts), np.concatenate(slope_parts)


def _positions(levels: FloatArray) -> FloatArray:
    """Knee positions to try: each observed D and the half-way points, below the last D."""
    midpoints = (levels[:-1] + levels[1:]) / 2.0
    positions = np.unique(np.concatenate([levels, midpoints]))
    if positions.shape[0] > MAX_POSITIONS:
        positions = np.linspace(levels[0], levels[-1], MAX_POSITIONS)
    # A knee at the last D would leave no samples in the stage after it.
    inside: FloatArray = positions[positions < levels[-1]]
    return inside


def _bic(stats: SegmentStats, sse: FloatArray, parameters: int) -> FloatArray:
    n = stats.total
    floor = SSE_FLOOR * n
    bic: FloatArray = n * np.log(np.maximum(sse, floor) / n) + parameters * math.log(n)
    return bic


def search_breakpoints(stats: SegmentStats) -> Breakpoints:
    """The 1-, 2- or 3-stage curve with the lowest BIC, knees refined locally.

    Parameters counted: one speed per pipeline, the slope s2 when there is a contention
    stage, and `KNEE_PARAMETERS` per knee.
    """
    positions = _positions(stats.levels)
    pipelines = stats.counts.shape[0]
    inf = np.array([np.inf])
    first_of_pairs, second_of_pairs = np.meshgrid(positions, positions, indexing="ij")
    ordered = first_of_pairs < second_of_pairs
    shapes = [
        (inf, inf, pipelines),
        (positions, np.full_like(positions, np.inf), pipelines + 1 + KNEE_PARAMETERS),
        (first_of_pairs[ordered], second_of_pairs[ordered], pipelines + 1 + 2 * KNEE_PARAMETERS),
    ]
    best: tuple[float, float, float] | None = None  # (bic, k1, k2)
    for first, second, parameters in shapes:
        if first.shape[0] == 0:
            continue
        sse, _ = _score(stats, first, second)
        bic = _bic(stats, sse, parameters)
        index = int(np.argmin(bic))
        if best is None or bic[index] < best[0]:
            best = (float(bic[index]), float(first[index]), float(second[index]))
    assert best is not None  # the one-stage shape always has its one candidate
    first_knee, second_knee = _refine(stats, positions, best[1], best[2])
    _, slope = _score(stats, np.array([first_knee]), np.array([second_knee]))
    sums = _sums(stats, np.array([first_knee]), np.array([second_knee]))
    s2 = float(slope[0])
    speeds = (sums.a[0] + s2 * sums.b[0]) / (
        sums.aa[0] + 2 * s2 * sums.ab[0] + s2 * s2 * sums.bb[0]
    )
    has_first = math.isfinite(first_knee)
    return Breakpoints(
        contention_from=first_knee if has_first else None,
        saturation_from=second_knee if math.isfinite(second_knee) else None,
        contention_slope=s2 if has_first else 1.0,
        speeds=tuple(float(g) for g in speeds),
    )


def _neighbourhood(positions: FloatArray, knee: float, low: float, high: float) -> FloatArray:
    """Fine grid between the grid positions either side of `knee`, within [low, high]."""
    index = int(np.searchsorted(positions, knee))
    below = positions[index - 1] if index > 0 else knee
    above = positions[index + 1] if index + 1 < positions.shape[0] else knee
    grid = np.linspace(max(below, low), min(above, high), REFINE_POINTS)
    # Keep the knee itself, so refining never ends worse than where it started.
    return np.unique(np.append(grid, knee))


def _refine(
    stats: SegmentStats, positions: FloatArray, first: float, second: float
) -> tuple[float, float]:
    """(k1, k2) after two rounds of local grid search around the grid optimum."""
    if not math.isfinite(first):
        return first, second
    lowest, highest = float(stats.levels[0]), float(np.nextafter(stats.levels[-1], 0.0))
    first_grid, second_grid = positions, positions
    for _ in range(2):
        firsts = _neighbourhood(first_grid, first, lowest, highest)
        seconds = np.array([second])
        if math.isfinite(second):
            seconds = _neighbourhood(second_grid, second, lowest, highest)
        pair_first, pair_second = np.meshgrid(firsts, seconds, indexing="ij")
        ordered = pair_first < pair_second
        sse, _ = _score(stats, pair_first[ordered], pair_second[ordered])
        index = int(np.argmin(sse))
        first, second = float(pair_first[ordered][index]), float(pair_second[ordered][index])
        first_grid, second_grid = firsts, seconds
    return first, second
