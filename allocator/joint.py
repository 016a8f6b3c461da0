"""`joint`: each job's decode mode, workers per GPU and decoder share (DESIGN.md, Allocation).

With a decoder of capacity K samples/s, a job in device mode has its JPEGs decoded by the
device at up to s_i * K samples/s, and its CPU workers only augment, at c'_i < c_i seconds
a sample: T_i = min(B_i * mu_i, s_i * K, n_i * d_i * eta(D) / c'_i), with sum(s_i) <= 1.
A job in cpu mode is as in `optimal`.

For fixed modes and workers the shares are easy: the device serves every sample at the same
price, so any split that meets each device job's CPU-side rate, as far as K goes, is best,
and the device jobs together make min(K, sum of their CPU-side rates) (`joint_total`).
Modes and workers are the hard part. A job gains from the device in proportion to the
worker time a decoded sample saves, c_i - c'_i, so the candidates for the device are the
prefixes of the jobs it can help ranked by that saving, by the ratio c_i / c'_i, and by the
share of a decoded sample that is extra throughput at `optimal`'s CPU-only split (a ranking
is given up after a few prefixes in a row gain nothing); with five jobs that can use it or
fewer, every choice of them; then each job alone, and single mode flips from the best until
none gains. For each candidate, `optimal` splits the
workers exactly as if the decoder were unlimited (device jobs at cost c'_i); if that split
asks more than K, the decoder is also water-filled over the candidate's jobs in rank order,
each job's peak capped at its rate, workers split again, and capacity a job cannot use
moved to the jobs it throttles. The candidate with every job on the CPU is `optimal`
itself, so `joint` never predicts less than `optimal`.

Against brute force over every mode and split of 3,000 small random requests (up to 4
jobs, 12 processes; tests/unit/allocator/test_joint.py) it was exact on 99.9 % and at worst
1.8 % short. The property test later found an oversubscribed request (one loader process
for four GPUs) where the flips missed a best two flips away, 5.3 % short: trying every
choice when there are few fixed it. It found two more (2026-11-27), 4.6 and 3.5 % short:
a best whose water-fill order no ranking gives (each choice of three device jobs or fewer
is now tried in every order), and a 2-GPU job's worker that no single worker given back
could pay for (`_trade`). Over 20,000 such requests it was then at worst 0.7 % short. It
runs `optimal` tens to hundreds of times: 10 to 50 ms for 10 jobs, 0.1 to 0.3 s for 100
(bench/bench_allocator.py); it is meant for a node's tens of jobs.

A request small enough (at most `_EXACT_CHOICES` splits of its workers times choices of
device jobs: a few jobs on a node of a few processes) is solved exactly instead, each
choice valued: the property test found one more miss there (2026-11-27), 8 % short.

Shares the device jobs cannot use are spread over them in proportion to what they use: the
device's fair queuing is work-conserving, so this only matters when predictions are off.
"""

import itertools
import math
from collections.abc import Sequence

from allocator.jointcandidate import (
    Candidate,
    beats,
    cpu_side,
    evaluate,
    from_plan,
    joint_total,
    plan_of,
)
from allocator.optimal import optimal
from allocator.throughput import loader_processes
from allocator.types import AllocationPlan, AllocationRequest

# Decoder capacity below this (samples/s) left over after a pass is not worth a second pass.
_LEFTOVER = 1e-6
_REBALANCE_PASSES = 4
_PATIENCE = 4  # prefixes in a row that gain nothing before a ranking is given up
_WINDOW = 8  # jobs past the best's device jobs that singles and flips look at
_TIE = 1e-9  # relative: two totals this close are equal, and the simpler candidate wins
_EVERY_SUBSET = 5  # with this many jobs that can use the decoder or fewer, try every choice
_EVERY_ORDER = 3  # and each choice of this many or fewer in every water-fill order
# With this many jobs or fewer each choice of device jobs is valued at its polished split
# (`_polish`): a pass values the total for every job once per freed worker, O(jobs^2), and
# polishing the chosen split alone took 100 jobs from 78 to 127 ms.
_POLISH_JOBS = 16
# A request with at most this many splits of its workers times choices of device jobs is
# solved by valuing each (a few milliseconds).
_EXACT_CHOICES = 4096


def joint(request: AllocationRequest) -> AllocationPlan:
    """The best mode, workers and share this search finds; never below `optimal`."""
    capacity = request.node.decoder_capacity
    helped = _helped(request)
    cpu_only = optimal(request)
    if capacity <= 0.0 or not helped:
        note = "no decoder on this node" if capacity <= 0.0 else "no job can use the decoder"
        return plan_of(request, from_plan(request, cpu_only), [note])
    exact = _exhaustive(request, helped)
    if exact is not None:  # few enough choices to value each: no search can do better
        cpu = from_plan(request, cpu_only)
        best = exact if beats(exact, cpu) else cpu
        note = f"every choice of modes and workers valued ({len(helped)} jobs can use it)"
        return plan_of(request, best, [f"decoder {capacity:g} samples/s; {note}"])
    return _search(request, helped, cpu_only)


def _search(
    request: AllocationRequest, helped: list[int], cpu_only: AllocationPlan
) -> AllocationPlan:
    """The best candidate the rankings, every choice of few jobs, singles and flips find
    (the module's docstring)."""
    search = _Search(request, from_plan(request, cpu_only))
    rankings = _rankings(request, helped, cpu_only)
    search.by_rankings(rankings)
    if len(helped) <= _EVERY_SUBSET:  # few enough to try every choice (the flips below
        search.every_choice(rankings[0], len(helped))  # miss a best two flips away)
    # Single jobs and single flips, among the jobs near the top of some ranking: a job far
    # down every ranking is one the decoder does little for.
    near = sorted({i for order in rankings for i in order[: len(search.best.device) + _WINDOW]})
    search.singles_and_flips(near, rankings[0])
    capacity = request.node.decoder_capacity
    notes = [
        f"decoder {capacity:g} samples/s; {len(search.best.device)} of {len(helped)} jobs "
        f"that can use it decode on it ({len(search.tried)} choices evaluated)"
    ]
    return plan_of(request, search.best, notes)


class _Search:
    """The candidates tried so far, by the device jobs in water-fill order (the order
    decides who gets the decoder first), and the best of them."""

    def __init__(self, request: AllocationRequest, cpu_only: Candidate) -> None:
        self.request, self.best = request, cpu_only
        self.tried: dict[tuple[int, ...], Candidate] = {(): cpu_only}
        self.small = len(request.jobs) <= _POLISH_JOBS

    def consider(self, device: frozenset[int], order: Sequence[int]) -> None:
        key = tuple(index for index in order if index in device)
        if key not in self.tried:
            self.tried[key] = evaluate(self.request, device, order)
            if self.small:  # each choice at its own best split: the choice of jobs hinges on it
                self.tried[key] = _polish(self.request, self.tried[key])
        if beats(self.tried[key], self.best):
            self.best = self.tried[key]

    def by_rankings(self, rankings: Sequence[Sequence[int]]) -> None:
        """Each ranking's prefixes, until a few in a row gain nothing."""
        for order in rankings:
            misses = 0
            for k in range(1, len(order) + 1):
                before = self.best
                self.consider(frozenset(order[:k]), order)
                misses = 0 if self.best is not before else misses + 1
                if misses == _PATIENCE:
                    break

    def every_choice(self, ranking: Sequence[int], most: int) -> None:
        """Every choice of two jobs or more, in every water-fill order when they are few:
        the order decides the workers, and no ranking need put first the job that should
        be."""
        for size in range(2, most + 1):
            for device in itertools.combinations(ranking, size):
                orders: list[Sequence[int]] = [ranking]
                if size <= _EVERY_ORDER:
                    orders = list(itertools.permutations(device))
                for fill in orders:
                    self.consider(frozenset(device), fill)

    def singles_and_flips(self, near: Sequence[int], ranking: Sequence[int]) -> None:
        """Each job alone, then single flips from the best until none gains."""
        for index in near:
            self.consider(frozenset({index}), [index])
        improved = True
        while improved:
            improved, start = False, self.best
            for index in near:
                flipped = start.device ^ {index}
                self.consider(flipped, [i for i in ranking if i in flipped])
                improved = improved or self.best is not start


def _exhaustive(request: AllocationRequest, helped: Sequence[int]) -> Candidate | None:
    """The best of every split of the workers and every choice of device jobs, when there
    are at most `_EXACT_CHOICES` of them (a small node); None when there are more. The
    search below found bests two flips, or an order, away one case at a time; on a small
    node the exact answer costs milliseconds."""
    capacity = max(request.node.cpu_workers, request.floor_processes)
    ranges = [range(1, max(1, capacity // job.gpus) + 1) for job in request.jobs]
    if math.prod(len(each) for each in ranges) * 2 ** len(helped) > _EXACT_CHOICES:
        return None
    best: Candidate | None = None
    zeros = (0.0,) * len(request.jobs)
    for workers in itertools.product(*ranges):
        if loader_processes(request, workers) > capacity:
            continue
        for size in range(len(helped) + 1):
            for chosen in itertools.combinations(helped, size):
                device = frozenset(chosen)
                total = joint_total(request, device, workers)
                candidate = Candidate(device, zeros, workers, total)
                if best is None or beats(candidate, best):
                    best = candidate
    return best


def _polish(request: AllocationRequest, chosen: Candidate) -> Candidate:
    """`chosen` with a worker per GPU taken from one device job (or none) and the processes
    free then handed out again one worker at a time to whichever job raises the total most,
    while that raises it: `optimal`'s split, made before the decoder's capacity binds, can
    leave workers on a device job that the saturated decoder makes useless and that CPU
    jobs could use (1,096 samples/s planned where 1,160 were possible). Then, for each job,
    a trade: the processes its next worker per GPU needs are freed from the other jobs at
    the least loss, a worker at a time, and it takes them. A 2-GPU job's next worker needs
    two processes, so no single worker given back can reach it (2,152 samples/s planned
    where 2,256 were possible: the property test found it)."""
    best = chosen
    while True:
        start = best
        for giver in [None, *sorted(start.device)]:
            if giver is not None and start.workers[giver] <= 1:
                continue
            workers = list(start.workers)
            if giver is not None:
                workers[giver] -= 1
            total = _refill(request, start.device, workers, giver)
            if total > best.total * (1.0 + _TIE) + _LEFTOVER:
                best = Candidate(start.device, start.decoder, tuple(workers), total)
        for taker in range(len(request.jobs)):
            traded = _trade(request, best.device, list(best.workers), taker)
            if traded is not None and traded[0] > best.total * (1.0 + _TIE) + _LEFTOVER:
                best = Candidate(best.device, best.decoder, tuple(traded[1]), traded[0])
        if best is start:
            return best


def _trade(
    request: AllocationRequest, device: frozenset[int], workers: list[int], taker: int
) -> tuple[float, list[int]] | None:
    """One more worker per GPU for `taker`, its processes freed from the other jobs a
    worker at a time, each time from the one whose loss is least (never below one each):
    the total and the workers; None when they cannot be freed."""
    capacity = max(request.node.cpu_workers, request.floor_processes)
    need = request.jobs[taker].gpus
    while capacity - loader_processes(request, workers) < need:
        losses = []
        for giver, job in enumerate(request.jobs):
            if giver == taker or workers[giver] <= 1:
                continue
            workers[giver] -= 1
            losses.append((-joint_total(request, device, workers), job.gpus, giver))
            workers[giver] += 1
        if not losses:
            return None
        _, _, giver = min(losses)
        workers[giver] -= 1
    workers[taker] += 1
    return joint_total(request, device, workers), workers


def _refill(
    request: AllocationRequest, device: frozenset[int], workers: list[int], giver: int | None
) -> float:
    """Add workers per GPU to `workers` (in place), the largest gain of the total first,
    never to `giver`, while the node's processes allow and a worker gains; the total."""
    capacity = max(request.node.cpu_workers, request.floor_processes)
    total = joint_total(request, device, workers)
    while True:
        gains = []
        for taker, job in enumerate(request.jobs):
            if taker == giver or loader_processes(request, workers) + job.gpus > capacity:
                continue
            workers[taker] += 1
            gains.append((joint_total(request, device, workers), taker))
            workers[taker] -= 1
        if not gains or max(gains)[0] <= total * (1.0 + _TIE) + _LEFTOVER:
            return total
        total, taker = max(gains)
        workers[taker] += 1


def _helped(request: AllocationRequest) -> list[int]:
    """Jobs whose augment-only cost is below their full cost: only they gain from the device."""
    return [
        index
        for index, job in enumerate(request.jobs)
        if job.device_sample_cost_s is not None and job.device_sample_cost_s < job.sample_cost_s
    ]


def _rankings(
    request: AllocationRequest, helped: list[int], cpu_only: AllocationPlan
) -> list[list[int]]:
    """The helped jobs in three orders: by worker time a decoded sample saves, by the ratio
    of the costs, and by the share of a decoded sample that is extra throughput at the
    CPU-only split (which sees jobs held back by their GPUs or by too few workers)."""

    def augment(index: int) -> float:
        cost = request.jobs[index].device_sample_cost_s
        assert cost is not None
        return cost

    def extra(index: int) -> float:
        job, allocation = request.jobs[index], cpu_only.allocations[request.jobs[index].id]
        on_device = cpu_side(job, allocation.workers_per_gpu, cpu_only.efficiency, device=True)
        return 1.0 - allocation.predicted_samples_per_s / on_device

    orders = [
        sorted(helped, key=lambda i: (-(request.jobs[i].sample_cost_s - augment(i)), i)),
        sorted(helped, key=lambda i: (-request.jobs[i].sample_cost_s / augment(i), i)),
        sorted(helped, key=lambda i: (-extra(i), i)),
    ]
    return [order for index, order in enumerate(orders) if order not in orders[:index]]
