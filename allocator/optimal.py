"""`optimal`: the exact maximiser of the predicted total throughput, and `fair`.

For a fixed eta every T_i is concave and piecewise linear in d_i, so the split of a budget of
processes is a knapsack solved exactly in `allocator.knapsack`. eta depends on the total D,
so we search D from the floor to the capacity by branch and bound. Over an interval
[lo, hi] of totals no split beats the knapsack optimum at eta(lo) with budget hi, nor the
cheaper fractional relaxation of it (eta never rises with D, and both only gain from a
larger budget), so intervals bounded below the best split found are dropped. A split chosen
at eta(lo) is also a candidate, valued at its own total. Among splits with the same
predicted total the one with the fewest processes wins, so workers that raise nothing stay
idle.
"""

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from allocator.baselines import NO_SPARE_NOTE, balance, floor_plan
from allocator.knapsack import FloatArray, IntArray, Steps, best_steps
from allocator.throughput import make_plan
from allocator.types import AllocationPlan, AllocationRequest

# Two totals closer than this (relative) are the same prediction; the fewer processes win.
_RELATIVE_TIE = 1e-9
# Intervals of totals with at most this many (total x job) cells get per-total bounds.
_EXPAND_CELLS = 20_000

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
    """Per-job constants as arrays, in request order."""

    gpus: IntArray
    cost: FloatArray  # c_i, seconds per sample per worker
    peak: FloatArray  # B_i * mu_i, samples per second once loading keeps up
    by_cost: IntArray  # job indices, cheapest sample first: the relaxation's fill order


def _arrays(request: AllocationRequest) -> _Jobs:
    cost = np.array([job.sample_cost_s for job in request.jobs])
    return _Jobs(
        gpus=np.array([job.gpus for job in request.jobs], dtype=np.int64),
        cost=cost,
        peak=np.array([job.max_samples_per_s for job in request.jobs]),
        by_cost=np.argsort(cost, kind="stable"),
    )


def _search(
    request: AllocationRequest, minimum: MinimumWorkers, incumbent: Sequence[int]
) -> list[int]:
    jobs = _arrays(request)
    contention = request.node.contention
    best = np.array(incumbent, dtype=np.int64)
    best_processes = int(jobs.gpus @ best)
    best_value = _total(jobs, best, contention.efficiency(best_processes))

    def consider(workers: IntArray) -> None:
        nonlocal best, best_value, best_processes
        processes = int(jobs.gpus @ workers)
        efficiency = contention.efficiency(processes)
        if np.any(workers < _floors(minimum, efficiency)):
            return  # chosen at a higher eta than its own total gives: misses a floor
        value = _total(jobs, workers, efficiency)
        tie = abs(value - best_value) <= _RELATIVE_TIE * max(best_value, 1.0)
        if (value > best_value and not tie) or (tie and processes < best_processes):
            best, best_value, best_processes = workers, value, processes

    # Heap of intervals [low, high] of the total, best bound first. A wide interval carries
    # the cheap fractional bound at eta(low) with budget high; when it comes up it is first
    # tightened to the exact knapsack optimum there (whose split is also a candidate), and
    # split in halves only if it still comes up after that. A small interval is expanded
    # into its single totals, each with its own fractional bound, in one vectorised call.
    low, high = request.floor_processes, request.node.cpu_workers
    # The split at full capacity is usually close to the best: a strong first incumbent
    # lets the bounds discard most intervals without solving them.
    at_capacity = _split_at(jobs, minimum, contention.efficiency(high), budget_total=high)
    if at_capacity is not None:
        consider(at_capacity)
    first = _bounds(jobs, minimum, contention.efficiencies([low]), np.array([high]))[0]
    heap = [(-first, low, high, False)]
    while heap:
        negative_bound, low, high, tightened = heapq.heappop(heap)
        if -negative_bound < best_value * (1.0 - _RELATIVE_TIE):
            break  # best-first: every interval left is bounded lower still
        if low == high:
            workers = _split_at(jobs, minimum, contention.efficiency(low), budget_total=low)
            if workers is not None:
                consider(workers)
        elif (high - low + 1) * len(request.jobs) <= _EXPAND_CELLS:
            totals = np.arange(low, high + 1)
            efficiencies = contention.efficiencies(totals)
            for total, bound in zip(
                totals, _bounds(jobs, minimum, efficiencies, totals), strict=True
            ):
                if bound >= best_value * (1.0 - _RELATIVE_TIE):
                    heapq.heappush(heap, (-bound, int(total), int(total), True))
        elif not tightened:
            workers = _split_at(jobs, minimum, contention.efficiency(low), budget_total=high)
            if workers is not None:
                consider(workers)
                exact = _total(jobs, workers, contention.efficiency(low))
                heapq.heappush(heap, (-exact, low, high, True))
        else:
            middle = (low + high) // 2
            parts = ((low, middle), (middle + 1, high))
            bounds = _bounds(
                jobs,
                minimum,
                contention.efficiencies([part_low for part_low, _ in parts]),
                np.array([part_high for _, part_high in parts]),
            )
            for (part_low, part_high), bound in zip(parts, bounds, strict=True):
                heapq.heappush(heap, (-bound, part_low, part_high, False))
    return [int(d) for d in best]


def _split_at(
    jobs: _Jobs, minimum: MinimumWorkers, efficiency: float, budget_total: int
) -> IntArray | None:
    """The best split using at most `budget_total` processes, valued at a fixed
    `efficiency`; None if the floors alone exceed the budget."""
    floors = _floors(minimum, efficiency)
    budget = budget_total - int(jobs.gpus @ floors)
    if budget < 0:
        return None
    step_gain = jobs.gpus * efficiency / jobs.cost  # one more worker per GPU, below the peak
    room = jobs.peak - np.minimum(jobs.peak, floors * step_gain)
    # The tolerance keeps a step that lands on the peak up to rounding a full step.
    full = np.floor(room / step_gain + 1e-9).astype(np.int64)
    partial = np.where(room - full * step_gain > 1e-9 * jobs.peak, room - full * step_gain, 0.0)
    most = budget // jobs.gpus
    partial = np.where(full >= most, 0.0, partial)
    steps = Steps(
        weights=jobs.gpus,
        full_gain=step_gain,
        full_count=np.minimum(full, most),
        partial_gain=partial,
    )
    return floors + best_steps(steps, budget)


def _total(jobs: _Jobs, workers: IntArray, efficiency: float) -> float:
    """`predicted_total` on arrays: sum of min(B*mu, n*d*eta/c)."""
    return float(np.minimum(jobs.peak, jobs.gpus * workers * efficiency / jobs.cost).sum())


def _floors(minimum: MinimumWorkers, efficiency: float) -> IntArray:
    """The least workers per GPU of each job at one efficiency."""
    floors: IntArray = minimum(np.array([efficiency]))[0]
    return floors


def _bounds(
    jobs: _Jobs, minimum: MinimumWorkers, efficiencies: FloatArray, totals: IntArray
) -> FloatArray:
    """For each (eta, total) pair, the fractional relaxation: every job at its floor, then
    the cheapest jobs' spare processes first, each worth eta/c samples/s up to the job's
    peak. -inf where the floors alone exceed the total."""
    efficiency = efficiencies[:, None]
    floor_processes = minimum(efficiencies) * jobs.gpus
    budget = totals - floor_processes.sum(axis=1)
    rate = (efficiency / jobs.cost)[:, jobs.by_cost]
    at_floor = np.minimum(jobs.peak, floor_processes * efficiency / jobs.cost)[:, jobs.by_cost]
    room = (jobs.peak[jobs.by_cost] - at_floor) / rate  # processes to each job's peak
    filled = np.clip(budget[:, None] - (np.cumsum(room, axis=1) - room), 0.0, room)
    value = at_floor.sum(axis=1) + (filled * rate).sum(axis=1)
    return np.where(budget >= 0, value, -np.inf)
