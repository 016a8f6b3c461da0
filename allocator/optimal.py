"""`optimal`: the exact maximiser of the predicted total throughput, and `fair`.

For a fixed eta every T_i is concave and piecewise linear in d_i, so the split of a budget of
processes is a knapsack solved exactly in `allocator.knapsack`. eta depends on the total D,
so we search D from the floor to the capacity by branch and bound. No split with a total in
an interval [lo, hi] beats the knapsack optimum at eta(lo) with budget hi (eta never rises
with D, and a larger budget only helps). Rather than solve that knapsack, we bound it with
its priced (Lagrangian) relaxation, which needs no sort and so is cheap to compute for many
intervals in one vectorised call. The search solves at full capacity first; then, in rounds,
it cuts the intervals still open into parts, bounds all parts at once, drops those bounded
below the best split found, and solves the single totals left, best bound first. Among
splits with the same predicted total the one with the fewest processes wins, so workers
that raise nothing stay idle.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from allocator.baselines import NO_SPARE_NOTE, balance, floor_plan
from allocator.knapsack import FloatArray, IntArray, Steps, best_steps, priced_bound
from allocator.throughput import make_plan
from allocator.types import AllocationPlan, AllocationRequest

# Two totals closer than this (relative) are the same prediction; the fewer processes win.
_RELATIVE_TIE = 1e-9

# Efficiencies (M,) -> the least workers per GPU of each job at each of them (M, jobs).
MinimumWorkers = Callable[[FloatArray], IntArray]


def optimal(request: AllocationRequest) -> AllocationPlan:
    """The split that maximises the predicted total, fewest processes among equals."""
    if request.node.cpu_workers <= request.floor_processes:
        return floor_plan("optimal", request, NO_SPARE_NOTE)
    jobs = len(request.jobs)

    def one_each(efficiencies: FloatArray) -> IntArray:
        return np.ones((len(efficiencies), jobs), dtype=np.int64)

    return make_plan("optimal", request, _search(request, one_each, [1] * jobs))


def fair(request: AllocationRequest) -> AllocationPlan:
    """`optimal` under a floor: no job below `fair_floor` of its throughput under `balance`."""
    if request.node.cpu_workers <= request.floor_processes:
        return floor_plan("fair", request, NO_SPARE_NOTE)
    fair_share = balance(request)
    floors = [
        request.fair_floor * fair_share.allocations[job.id].predicted_samples_per_s
        for job in request.jobs
    ]
    workers_at_full_efficiency = np.array(floors) * np.array(
        [job.sample_cost_s / job.gpus for job in request.jobs]
    )

    def minimum(efficiencies: FloatArray) -> IntArray:
        # Smallest d with n*d*eta/c >= floor; the floor never exceeds the job's B*mu.
        needed = np.ceil(workers_at_full_efficiency / efficiencies[:, None] - 1e-9)
        floors: IntArray = np.maximum(1, needed).astype(np.int64)
        return floors

    start = [fair_share.allocations[job.id].workers_per_gpu for job in request.jobs]
    notes = [f"each job keeps at least {request.fair_floor:.0%} of its balance throughput"]
    return make_plan("fair", request, _search(request, minimum, start), notes)


@dataclass(frozen=True)
class _Jobs:
    """Per-job constants as arrays, all in one order of the jobs."""

    gpus: IntArray
    cost: FloatArray  # c_i, seconds per sample per worker
    peak: FloatArray  # B_i * mu_i, samples per second once loading keeps up
    gain_per_eta: FloatArray  # n_i / c_i: one more worker per GPU, per unit of eta, below the peak
    negligible: FloatArray  # 1e-9 * peak: a leftover below this is rounding, not a partial step
    remaining: FloatArray | None  # samples left, when every job says; orders equal steps

    @classmethod
    def of(cls, request: AllocationRequest) -> "_Jobs":
        """The request's jobs, in request order."""
        gpus = np.array([job.gpus for job in request.jobs], dtype=np.int64)
        cost = np.array([job.sample_cost_s for job in request.jobs])
        peak = np.array([job.max_samples_per_s for job in request.jobs])
        left = [job.remaining_samples for job in request.jobs]
        remaining = None if None in left else np.array(left, dtype=np.float64)
        return cls(gpus, cost, peak, gpus / cost, 1e-9 * peak, remaining)

    def reordered(self, order: IntArray) -> "_Jobs":
        """The same jobs in `order`."""
        return _Jobs(
            self.gpus[order],
            self.cost[order],
            self.peak[order],
            self.gain_per_eta[order],
            self.negligible[order],
            None if self.remaining is None else self.remaining[order],
        )


def _search(
    request: AllocationRequest, minimum: MinimumWorkers, incumbent: Sequence[int]
) -> list[int]:
    """The best split for `request` under `minimum`, starting from `incumbent`."""
    search = _Search(request, minimum, incumbent)
    low, high = request.floor_processes, request.node.cpu_workers
    # The split at full capacity is usually the best or close to it: a strong first
    # incumbent lets the bounds discard most totals without solving them.
    search.solve(high)
    # Rounds: cut every interval still open into parts and bound all parts in one call. A part
    # that is a single total and may beat the best is solved, best bound first; a wider one
    # that may is cut again in the next round.
    intervals = [(low, high - 1)]
    while intervals:
        lows, highs = _cut(intervals)
        bounds = search.bounds(lows, highs)
        still_open = bounds >= search.floor_value()
        wide = still_open & (lows < highs)
        intervals = list(zip(lows[wide].tolist(), highs[wide].tolist(), strict=True))
        single = still_open & (lows == highs)
        totals, bounds = lows[single], bounds[single]
        for index in np.argsort(-bounds, kind="stable"):
            if bounds[index] < search.floor_value():
                break  # and so is every total after it
            search.solve(int(totals[index]))
    return [int(d) for d in search.best]


class _Search:
    """The state of one search: the jobs, and the best split found so far."""

    def __init__(
        self, request: AllocationRequest, minimum: MinimumWorkers, incumbent: Sequence[int]
    ) -> None:
        self.jobs = _Jobs.of(request)
        # The bounds fill jobs cheapest sample first, so they keep the jobs in that order.
        self.by_cost = np.argsort(self.jobs.cost, kind="stable")
        self.jobs_by_cost = self.jobs.reordered(self.by_cost)
        self.minimum = minimum
        self.contention = request.node.contention
        self.best = np.array(incumbent, dtype=np.int64)
        self.best_processes = int(self.jobs.gpus @ self.best)
        self.best_value = _total(
            self.jobs, self.best, self.contention.efficiency(self.best_processes)
        )

    def floor_value(self) -> float:
        """What a bound must reach to be worth a look: the best value, less the tie margin."""
        return self.best_value * (1.0 - _RELATIVE_TIE)

    def solve(self, total: int) -> None:
        """Solve the knapsack at eta(total) with budget `total`, and consider its split."""
        efficiency = self.contention.efficiency(total)
        workers = _split_at(self.jobs, _floors(self.minimum, efficiency), efficiency, total)
        if workers is not None:
            self.consider(workers)

    def consider(self, workers: IntArray) -> None:
        """Keep `workers` if it beats the best, valued at its own total.

        `workers` comes from `solve(total)` and uses at most `total` processes, so eta at its
        own total is no lower and its floors there are no higher: it keeps every floor."""
        processes = int(self.jobs.gpus @ workers)
        efficiency = self.contention.efficiency(processes)
        value = _total(self.jobs, workers, efficiency)
        tie = abs(value - self.best_value) <= _RELATIVE_TIE * max(self.best_value, 1.0)
        if (value > self.best_value and not tie) or (tie and processes < self.best_processes):
            self.best, self.best_value, self.best_processes = workers, value, processes

    def bounds(self, lows: IntArray, highs: IntArray) -> FloatArray:
        """For each interval [low, high] of totals, an upper bound on every split in it.

        No split with a total D in the interval beats the knapsack at eta(low) with budget
        high: eta never rises with D, the budget is no smaller, and the floors at eta(low)
        are no higher than at eta(D)."""
        efficiencies = self.contention.efficiencies(lows)
        floors = self.minimum(efficiencies)[:, self.by_cost]
        return _bounds(self.jobs_by_cost, floors, efficiencies, highs)


def _cut(intervals: list[tuple[int, int]]) -> tuple[IntArray, IntArray]:
    """The parts of `intervals`, as arrays of their lowest and highest totals: each interval
    cut into parts of width 1, 2, 4, ... counting down from its top.

    The best total is usually at or just below the top (the capacity, in the first round):
    there the parts are single totals with tight bounds, and further down, where the bounds
    fall away, wide parts suffice, so one round of a few parts usually settles the search.
    Wherever the best lies, no part is wider than half its interval, rounded up, so each
    round at least halves the width still open around it."""
    lows: list[int] = []
    highs: list[int] = []
    for low, high in intervals:
        top, width = high, 1
        while top >= low:
            lows.append(max(low, top - width + 1))
            highs.append(top)
            top, width = top - width, 2 * width
    return np.array(lows, dtype=np.int64), np.array(highs, dtype=np.int64)


def _steps_at(
    jobs: _Jobs, floors: IntArray, efficiency: float | FloatArray
) -> tuple[Steps, FloatArray, FloatArray]:
    """Each job's extra steps above its floor at `efficiency`, the floor's value, and the
    room between floor and peak (samples/s). `efficiency` is one value, or a column with
    one per row of `floors`."""
    step_gain = efficiency * jobs.gain_per_eta  # one more worker per GPU, below the peak
    at_floor = np.minimum(jobs.peak, floors * step_gain)
    room = jobs.peak - at_floor
    # The tolerance keeps a step that lands on the peak up to rounding a full step.
    full = np.floor(room / step_gain + 1e-9)
    leftover = room - full * step_gain
    partial = np.where(leftover > jobs.negligible, leftover, 0.0)
    steps = Steps(
        weights=jobs.gpus,
        full_gain=step_gain,
        full_count=full.astype(np.int64),
        partial_gain=partial,
    )
    return steps, at_floor, room


def _split_at(
    jobs: _Jobs, floors: IntArray, efficiency: float, budget_total: int
) -> IntArray | None:
    """The best split above `floors` using at most `budget_total` processes, valued at a
    fixed `efficiency`; None if the floors alone exceed the budget."""
    budget = budget_total - int(jobs.gpus @ floors)
    if budget < 0:
        return None
    steps, _, _ = _steps_at(jobs, floors, efficiency)
    if jobs.remaining is not None:
        steps = replace(steps, remaining=jobs.remaining, start=floors)
    return floors + best_steps(steps, budget)


def _total(jobs: _Jobs, workers: IntArray, efficiency: float) -> float:
    """`predicted_total` on arrays: sum of min(B*mu, n*d*eta/c)."""
    return float(np.minimum(jobs.peak, jobs.gpus * workers * efficiency / jobs.cost).sum())


def _floors(minimum: MinimumWorkers, efficiency: float) -> IntArray:
    """The least workers per GPU of each job at one efficiency."""
    floors: IntArray = minimum(np.array([efficiency]))[0]
    return floors


def _bounds(
    jobs: _Jobs, floors: IntArray, efficiencies: FloatArray, totals: IntArray
) -> FloatArray:
    """For each row (floors, eta, total), an upper bound on the knapsack `_split_at` solves
    there: the floors' value plus `priced_bound`, at a price per process picked by filling
    jobs up to their peaks, cheapest sample first, as if workers came in fractions: the gain
    per process (eta/c) of the job where the budget runs out, or 0 if every job reaches its
    peak. Any price gives a valid bound; this one is about as tight as the linear
    relaxation. Jobs must be in cost order. -inf where the floors alone exceed the total."""
    budgets = totals - floors @ jobs.gpus
    efficiency = efficiencies[:, None]
    steps, at_floor, room = _steps_at(jobs, floors, efficiency)
    rate = efficiency / jobs.cost  # samples/s per process, below the peak
    reached = np.cumsum(room / rate, axis=1) >= budgets[:, None]
    prices = np.max(np.where(reached, rate, 0.0), axis=1, initial=0.0)
    value = at_floor.sum(axis=1) + priced_bound(steps, budgets, prices)
    bounds: FloatArray = np.where(budgets >= 0, value, -np.inf)
    return bounds
