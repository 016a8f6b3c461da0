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
taken; the rest are bundled in sorted runs into items of the next size. A job's full steps
are one run of equal gains, so runs are sorted once, and only the best budget // size steps
of each size, the most that can ever be used, are expanded. Other weight sets fall back to a
dynamic programme over the budget.

`priced_bound` bounds the optimum from above without solving it, for many problems at once.
"""

from dataclasses import dataclass
from itertools import pairwise

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Steps:
    """Every job's extra steps, as parallel arrays in job order. `priced_bound` also takes
    the gain and count arrays with one row per problem, jobs along the last axis."""

    weights: IntArray
    full_gain: FloatArray
    full_count: IntArray
    partial_gain: FloatArray  # 0 where the job has no partial step
    # Optional tie order: among steps of equal gain and weight, the step of the job that
    # would otherwise finish last comes first. `remaining` is each job's work left and
    # `start` its workers per GPU before its first step; a job's k-th step is keyed by
    # remaining / ((start + k) x full_gain), its finish time before the step while its
    # rate grows by full_gain a step. Without them equal gains go in job order.
    remaining: FloatArray | None = None
    start: IntArray | None = None

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
    sizes = sorted(set(steps.weights.tolist()))
    if len(sizes) == 1:
        return _greedy(steps, sizes[0], budget // sizes[0])
    if all(larger % smaller == 0 for smaller, larger in pairwise(sizes)):
        return _merge_divisible(steps, budget, sizes)
    return _dynamic_programme(steps, budget)


def priced_bound(steps: Steps, budgets: IntArray, prices: FloatArray) -> FloatArray:
    """Per row, an upper bound on what `best_steps` gains, valid for any price >= 0 per
    process (the Lagrangian relaxation of the budget). Rows are separate problems: the gain
    and count arrays have one row per budget and price, `weights` is shared.

    Whatever steps a choice takes, its gain is what their gains exceed the price of their
    processes, plus the price of those processes, which is at most price * budget. So no
    choice gains more than price * budget plus every step's excess over its price, counted
    where positive. Needs no sort; how tight it is depends on the price."""
    price = prices[:, None] * steps.weights  # the price of one step of each job
    full_excess = steps.full_count * np.maximum(steps.full_gain - price, 0.0)
    partial_excess = np.maximum(steps.partial_gain - price, 0.0)
    bound: FloatArray = prices * budgets + (full_excess + partial_excess).sum(axis=-1)
    return bound


@dataclass(frozen=True)
class _Runs:
    """Every job's steps as runs of equal gain, its full steps and then its partial one,
    sorted by weight and then by gain, descending. Ties keep job order, and a job's full
    steps come before its partial one, so a job's steps are always taken in order."""

    gain: FloatArray
    count: IntArray
    owner: IntArray
    partial: npt.NDArray[np.bool_]  # a job's partial step, or a run of its full steps
    of_weight: dict[int, slice]  # where each weight's runs lie
    steps: Steps

    @classmethod
    def of(cls, steps: Steps, sizes: list[int]) -> "_Runs":
        """Sort the runs of `steps`, whose distinct weights are `sizes`, ascending."""
        gain = np.concatenate((steps.full_gain, steps.partial_gain))
        has_partial = (steps.partial_gain > 0.0).astype(np.int64)
        count = np.concatenate((steps.full_count, has_partial))
        weight = np.concatenate((steps.weights, steps.weights))
        order = np.lexsort((-gain, weight))  # stable: the last key sorts first
        ends = np.searchsorted(weight[order], sizes, side="right").tolist()
        of_weight = {
            size: slice(start, end)
            for size, start, end in zip(sizes, [0, *ends[:-1]], ends, strict=True)
        }
        jobs = len(steps.weights)
        owner = order % jobs  # runs are all full ones, then all partial ones
        return cls(gain[order], count[order], owner, order >= jobs, of_weight, steps)

    def best(self, size: int, limit: int) -> tuple[FloatArray, IntArray]:
        """The `limit` largest-gain steps of weight `size`, gain descending, as (gains,
        owning jobs). No choice can use more steps of one size than the budget holds, and
        whatever a choice uses of a size is a prefix of this order, so the rest never
        matter."""
        runs = self.of_weight[size]
        counts = self.count[runs]
        before = np.cumsum(counts) - counts
        if self.steps.remaining is None:
            taken = np.minimum(counts, np.maximum(limit - before, 0))
            return np.repeat(self.gain[runs], taken), np.repeat(self.owner[runs], taken)
        return self._best_by_finish(runs, int(np.count_nonzero(before < limit)), limit)

    def _best_by_finish(self, runs: slice, touched: int, limit: int) -> tuple[FloatArray, IntArray]:
        """`best` with equal gains ordered by the jobs' finish times (`Steps`): every step of
        the runs the limit reaches, and of the rest of the last one's equal-gain group, in
        that order, cut at the limit."""
        gain = self.gain[runs]
        if touched:
            # Gains run descending: the group of the last touched run ends where they drop.
            touched = int(np.searchsorted(-gain, -gain[touched - 1], side="right"))
        # No job can take more than `limit` steps here: expand no more of its run than that.
        counts = np.minimum(self.count[runs][:touched], limit)
        owners = np.repeat(self.owner[runs][:touched], counts)
        gains = np.repeat(gain[:touched], counts)
        # A step's place in its job: its index in a run of full steps, or after them.
        first = np.repeat(np.cumsum(counts) - counts, counts)
        place = np.arange(len(owners)) - first
        steps = self.steps
        assert steps.remaining is not None and steps.start is not None
        place = np.where(
            np.repeat(self.partial[runs][:touched], counts), steps.full_count[owners], place
        )
        workers = np.maximum(steps.start[owners] + place, 1)
        finish = steps.remaining[owners] / (workers * steps.full_gain[owners])
        order = np.lexsort((-finish, -gains))[:limit]  # stable: then job order, own steps in order
        return gains[order], owners[order]


def _greedy(steps: Steps, size: int, count: int) -> IntArray:
    """Equal weights: the `count` largest gains, a job's steps in order."""
    _, owners = _Runs.of(steps, [size]).best(size, count)
    return np.bincount(owners, minlength=len(steps.weights))


@dataclass(frozen=True)
class _Level:
    """One size's items, sorted by gain, kept to decode which steps were taken."""

    is_bundle: npt.NDArray[np.bool_]  # per sorted item: a bundle of smaller items, or a step
    owners: IntArray  # the owning job of each of this size's own steps, in sorted order
    take: int  # how many sorted items the residual takes at this size
    per_bundle: int  # how many of these items make one item of the next size


def _merge_divisible(steps: Steps, budget: int, sizes: list[int]) -> IntArray:
    """The merge algorithm for divisible sizes (module docstring); `sizes` ascending."""
    runs = _Runs.of(steps, sizes)
    levels: list[_Level] = []
    carried = np.zeros(0)
    for position, size in enumerate(sizes):
        budget -= budget % size  # what no item of this size or larger can use
        native_gains, native_owners = runs.best(size, budget // size)
        values = np.concatenate((carried, native_gains))
        # Stable: equal gains keep their order, so a job's steps are taken in order.
        order = np.argsort(-values, kind="stable")
        last = position == len(sizes) - 1
        take = budget // size if last else (budget % sizes[position + 1]) // size
        per_bundle = 1 if last else sizes[position + 1] // size
        levels.append(_Level(order < len(carried), native_owners, take, per_bundle))
        if last:
            break
        budget -= take * size
        carried = _bundle(values[order[take:]], per_bundle)
    return np.bincount(np.concatenate(_taken_owners(levels)), minlength=len(steps.weights))


def _bundle(items: FloatArray, per_bundle: int) -> FloatArray:
    """The sums of consecutive groups of `per_bundle` items; the last group may be short."""
    if len(items) % per_bundle:
        items = np.concatenate((items, np.zeros(per_bundle - len(items) % per_bundle)))
    # Adding strided slices beats a reduction over a short axis, which numpy does slowly.
    bundles = items[::per_bundle].copy()
    for offset in range(1, per_bundle):
        bundles += items[offset::per_bundle]
    return bundles


def _taken_owners(levels: list[_Level]) -> list[IntArray]:
    """The owning job of every taken step, level by level from the largest size down.

    What is taken at each level is a prefix of its sorted items: the residual first, then
    the items of the bundles taken one level up, which come next in order because the
    bundles were cut from that order and, as sums of ever smaller gains, keep it. Within a
    prefix the steps are the first of this size's own steps and the bundles the first
    bundles, since the sort is stable and both came in sorted."""
    owners = []
    count = levels[-1].take
    for index in reversed(range(len(levels))):
        level = levels[index]
        bundles = int(np.count_nonzero(level.is_bundle[:count]))
        owners.append(level.owners[: count - bundles])
        if index:
            below = levels[index - 1]
            # The last bundle may be short (padded with nothing).
            count = min(below.take + bundles * below.per_bundle, len(below.is_bundle))
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
