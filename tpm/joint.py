"""The node's contention eta(D), learned from what jobs measure together (issue 16, item 1).

A profile of one job alone on the node (`tpm/contention.py`) cannot tell the node's
contention from the job's own saturation. Jobs running together can: the SDK times each
loader worker's seconds per sample, t = c_i / eta(D), where c_i is the job's own cost and D
the loader processes on the whole node then. A job that ran at two node loads measured
eta's ratio between them, whatever its c_i; several jobs at several loads, overlapping,
measure the curve's shape. In logs the model is linear,

    log t = log c_i - log eta(D),

one unknown per job and one per load seen, each (job, load) cell weighed by its timings.
A job seen at one load only says nothing of eta: its c_i absorbs it. Timings fix eta's
ratios, not its scale (c_i and eta trade off): the scale of each group of loads the jobs
connect is the prior's at the group's least load, where the node is least contended and a
profile most likely right. The fitted points are made non-increasing in D (the contract of
the allocator's curve) by isotonic regression, weighted by timings. The curve planned on is
the prior corrected by them: its eta times the fit's ratio to it, that ratio linear
between the loads measured and held past them (up to the most the node may run). Where
nothing was measured the prior's shape is what is known; at the least load measured the
ratio is 1 (the scale), so below it the prior stands.

Pure: timings in, points out.
"""

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

# A job's timings at one load count once they are this many: the median of fewer is noise.
MIN_CELL = 3
# The weight that pins a group's least load to the prior: the scale, not a measurement.
_ANCHOR = 1e6
# No node's loaders run a thousand times slower for contention: a fit below this is the
# timings' own error (a job whose pipeline changed between loads), not the node.
LEAST_ETA = 1e-3

Points = tuple[tuple[float, float], ...]


class Curve(Protocol):
    """eta(D) as the allocator reads it (allocator/contention.py's `ContentionCurve`, which
    tpm may not import): its points, and eta at any load."""

    @property
    def points(self) -> Points: ...

    def efficiency(self, processes: float) -> float: ...


@dataclass(frozen=True)
class LoaderTiming:
    """One heartbeat's loader timing, with where it was measured."""

    job: str
    processes: int  # loader processes on the whole node then (D)
    seconds_per_sample: float  # one worker's, as timed (t = c / eta(D))


def fit_joint_contention(
    timings: Sequence[LoaderTiming], prior: Curve, most: float
) -> Points | None:
    """eta(D) as points (D, eta) up to `most` loader processes from jobs' timings at
    several node loads, the prior where none reach; None while no job has been timed at two
    loads (module docstring)."""
    cells = _cells(timings)
    jobs = sorted({job for job, _ in cells})
    loads = sorted({load for _, load in cells})
    if not loads:
        return None
    columns = {load: index for index, load in enumerate(loads)}
    rows = {job: len(loads) + index for index, job in enumerate(jobs)}
    equations: list[tuple[dict[int, float], float, float]] = []  # (coefficients, value, weight)
    for (job, load), (log_time, count) in cells.items():
        equations.append(({rows[job]: 1.0, columns[load]: -1.0}, log_time, float(count)))
    for load in _least_of_each_group(cells):
        equations.append(({columns[load]: 1.0}, math.log(prior.efficiency(load)), _ANCHOR))
    matrix = np.zeros((len(equations), len(loads) + len(jobs)))
    values = np.zeros(len(equations))
    for row, (coefficients, value, weight) in enumerate(equations):
        root = math.sqrt(weight)
        for column, coefficient in coefficients.items():
            matrix[row, column] = coefficient * root
        values[row] = value * root
    solution = np.linalg.lstsq(matrix, values, rcond=None)[0]
    logs = np.clip(solution[: len(loads)], math.log(LEAST_ETA), 0.0)
    # Here, not at the top: scikit-learn takes most of a second to import, and every
    # process that imports the scheduler (the daemon, the CLI, the simulator) would pay it.
    from sklearn.isotonic import IsotonicRegression  # noqa: PLC0415

    counts = [sum(n for (_, at), (_, n) in cells.items() if at == load) for load in loads]
    etas = IsotonicRegression(increasing=False).fit_transform(
        np.array(loads, dtype=float), np.exp(logs), sample_weight=counts
    )
    # Pooling may have moved the least load off its anchor: the scale is the prior's there.
    etas = np.minimum(etas * prior.efficiency(loads[0]) / etas[0], 1.0)
    fitted = [(float(load), float(eta)) for load, eta in zip(loads, etas, strict=True)]
    return _merge(prior, fitted, most)


def measured_loads(timings: Sequence[LoaderTiming]) -> frozenset[int]:
    """The loads at which these timings measure eta: those of the jobs timed at two loads
    or more, with enough timings at each."""
    return frozenset(load for _, load in _cells(timings))


def _cells(timings: Sequence[LoaderTiming]) -> dict[tuple[str, int], tuple[float, int]]:
    """(job, load) -> (median log seconds per sample, timings) for the cells with enough
    timings, of the jobs timed at two loads or more."""
    logs: dict[tuple[str, int], list[float]] = defaultdict(list)
    for timing in timings:
        seconds = timing.seconds_per_sample
        if math.isfinite(seconds) and seconds > 0.0 and timing.processes >= 1:
            logs[(timing.job, timing.processes)].append(math.log(seconds))
    full = {key: values for key, values in logs.items() if len(values) >= MIN_CELL}
    loads_of: dict[str, int] = defaultdict(int)
    for job, _ in full:
        loads_of[job] += 1
    return {
        (job, load): (float(np.median(values)), len(values))
        for (job, load), values in full.items()
        if loads_of[job] >= 2
    }


def _least_of_each_group(cells: Mapping[tuple[str, int], object]) -> list[int]:
    """The least load of each group of loads that jobs timed at both connect."""
    group: dict[int, int] = {}  # load -> a load of its group (union-find, halving paths)

    def root(load: int) -> int:
        while group.setdefault(load, load) != load:
            group[load] = group[group[load]]
            load = group[load]
        return load

    first: dict[str, int] = {}
    for job, load in cells:
        group[root(load)] = root(first.setdefault(job, load))
    least: dict[int, int] = {}
    for load in group:
        least[root(load)] = min(load, least.get(root(load), load))
    return sorted(least.values())


def _merge(prior: Curve, fitted: list[tuple[float, float]], most: float) -> Points:
    """The prior corrected by the fit: at each load the prior's eta times the fit's ratio to
    it, linear between the loads measured and held past them, up to `most`; made
    non-increasing throughout."""
    loads = [d for d, _ in fitted]
    ratios = [eta / prior.efficiency(d) for d, eta in fitted]
    grid = sorted({*loads, *(d for d, _ in prior.points if d < most), max(most, loads[-1])})
    merged: list[tuple[float, float]] = []
    ceiling = 1.0
    for load in grid:
        ratio = float(np.interp(load, loads, ratios))
        ceiling = min(ceiling, prior.efficiency(load) * ratio)
        merged.append((float(load), max(ceiling, 1e-6)))
    return tuple(merged)
