"""Exact inner problem of `optimal`: split a budget of loader processes at a fixed eta.

Each job i may take extra steps (one more worker per GPU each), every step costing
`weights[i]` processes (the job's GPU count). At a fixed eta its throughput is linear in its
workers until it reaches its peak, so its steps are `full_count[i]` steps worth
`full_gain[i]` each and then at most one smaller `partial_gain[i]` (0 when there is none);
a job's steps are taken in that order. Maximise the total gain within the budget.

With every job's weight equal this is plain greedy. With different GPU counts it is a
knapsack, where greedy is not exact. When the distinct weights divide one another (1, 2, 4, 8
GPUs) we use the classical merge algorithm for divisible item sizes: the budget's remainder
modulo the next size can only be filled by the smallest items, so the best of those are
taken; the rest are bundled in sorted runs into items of the next size. Only the best
budget // size steps of each size can ever be used, so only those are expanded and sorted.
Other weight sets fall back to a dynamic programme over the budget.
"""

from dataclasses import dataclass
from itertools import pairwise

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Steps:
    """Every job's extra steps, as parallel arrays in job order."""

    weights: IntArray
    full_gain: FloatArray
    full_count: IntArray
    partial_gain: FloatArray  # 0 where the job has no partial step

    def gains(self, job: int) -> list[float]:
        """Job `job`'s steps, in the order they must be taken."""
        steps = [float(self.full_gain[job])] * int(self.full_count[job])
        if self.partial_gain[job] > 0.0:
            steps.append(float(self.partial_gain[job]))
        return steps


def best_steps(steps: Steps, budget: int) -> IntArray:
    """How many steps each job takes in a gain-maximising choice within `budget`."""
    jobs = len(steps.weights)
    if budget <= 0 or jobs == 0:
        return np.zeros(jobs, dtype=np.int64)
    sizes = [int(size) for size in np.unique(steps.weights)]
    if len(sizes) == 1:
        return _greedy(steps, sizes[0], budget // sizes[0])
    if all(larger % smaller == 0 for smaller, larger in pairwise(sizes)):
        return _merge_divisible(steps, budget, sizes)
    return _dynamic_programme(steps, budget)


def _best_of_size(steps: Steps, size: int, limit: int) -> tuple[FloatArray, IntArray]:
    """The `limit` largest-gain steps of the jobs of weight `size`, gain descending, as
    (gains, owning jobs). Ties keep job order, and a job's full steps come before its partial
    one. No choice can use more steps of one size than the budget holds, and whatever a
    choice uses of a size is a prefix of this order, so the rest never matter."""
    jobs = np.flatnonzero(steps.weights == size)
    run_gain = np.concatenate((steps.full_gain[jobs], steps.partial_gain[jobs]))
    run_count = np.concatenate((steps.full_count[jobs], steps.partial_gain[jobs] > 0.0))
    run_owner = np.concatenate((jobs, jobs))
    order = np.argsort(-run_gain, kind="stable")
    counts = run_count[order].astype(np.int64)
    before = np.cumsum(counts) - counts
    counts = np.clip(limit - before, 0, counts)
    return np.repeat(run_gain[order], counts), np.repeat(run_owner[order], counts)


def _greedy(steps: Steps, size: int, count: int) -> IntArray:
    """Equal weights: the `count` largest gains, a job's steps in order."""
    _, owners = _best_of_size(steps, size, count)
    return np.bincount(owners, minlength=len(steps.weights))


@dataclass(frozen=True)
class _Level:
    """Items of one size after sorting and taking the residual, kept to decode bundles."""

    is_bundle: npt.NDArray[np.bool_]
    ref: IntArray  # owning job, or the bundle's index at this level
    per_bundle: int  # how many of these items make one item of the next size


def _merge_divisible(steps: Steps, budget: int, sizes: list[int]) -> IntArray:
    chosen_bundles: list[tuple[int, IntArray]] = []  # (level, bundle indices taken there)
    chosen_jobs: list[IntArray] = []
    levels: list[_Level] = []
    carried = np.zeros(0)
    for position, size in enumerate(sizes):
        budget -= budget % size  # what no item of this size or larger can use
        native_gains, native_owners = _best_of_size(steps, size, budget // size)
        values = np.concatenate((carried, native_gains))
        is_bundle = np.concatenate((np.ones(len(carried), bool), np.zeros(len(native_gains), bool)))
        ref = np.concatenate((np.arange(len(carried)), native_owners))
        # Stable: equal gains keep their order, so a job's steps are taken in order.
        order = np.argsort(-values, kind="stable")
        values, is_bundle, ref = values[order], is_bundle[order], ref[order]
        last = position == len(sizes) - 1
        take = budget // size if last else (budget % sizes[position + 1]) // size
        chosen_jobs.append(ref[:take][~is_bundle[:take]])
        chosen_bundles.append((position - 1, ref[:take][is_bundle[:take]]))
        if last:
            break
        budget -= take * size
        per_bundle = sizes[position + 1] // size
        rest = values[take:]
        levels.append(_Level(is_bundle[take:], ref[take:], per_bundle))
        padded = np.concatenate((rest, np.zeros(-len(rest) % per_bundle)))
        carried = padded.reshape(-1, per_bundle).sum(axis=1)
    for level, bundles in chosen_bundles:
        chosen_jobs.extend(_open_bundles(levels, level, bundles))
    return np.bincount(np.concatenate(chosen_jobs), minlength=len(steps.weights))


def _open_bundles(levels: list[_Level], level: int, bundles: IntArray) -> list[IntArray]:
    """The owning job of every step that the taken `bundles` of `levels[level]` hold."""
    owners = []
    while len(bundles):
        items = levels[level]
        positions = (bundles[:, None] * items.per_bundle + np.arange(items.per_bundle)).ravel()
        positions = positions[positions < len(items.ref)]  # the last bundle may be short
        owners.append(items.ref[positions][~items.is_bundle[positions]])
        bundles = items.ref[positions][items.is_bundle[positions]]
        level -= 1
    return owners


def _dynamic_programme(steps: Steps, budget: int) -> IntArray:
    best = np.zeros(budget + 1)  # best[b]: the most gain from the jobs so far within b
    picks: list[IntArray] = []
    columns = np.arange(budget + 1)
    for job, weight in enumerate(int(w) for w in steps.weights):
        job_gains = steps.gains(job)
        most = min(len(job_gains), budget // weight)
        prefix = np.concatenate(([0.0], np.cumsum(job_gains[:most])))
        candidates = np.full((most + 1, budget + 1), -np.inf)
        for count in range(most + 1):
            cost = count * weight
            candidates[count, cost:] = best[: budget + 1 - cost] + prefix[count]
        pick = np.argmax(candidates, axis=0)  # first maximum: the fewest steps on ties
        best = candidates[pick, columns]
        picks.append(pick)
    taken = np.zeros(len(steps.weights), dtype=np.int64)
    left = budget
    for job in reversed(range(len(picks))):
        taken[job] = int(picks[job][left])
        left -= int(taken[job] * steps.weights[job])
    return taken
