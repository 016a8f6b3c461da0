"""A-Dloader's Worker Allocation Algorithm (Algorithm 1), and `static`, WAA frozen at arrival.

Algorithm 1 line by line, with three documented corrections:

1. Capacity counts loader processes, sum(gpus * workers_per_gpu), not the sum of per-GPU
   counts the paper compares with C: a 2-GPU job with 4 workers per GPU runs 8 processes.
   Line 1 likewise becomes "C <= the processes of one worker per GPU".
2. The decrement loop stops as soon as the sum fits (sum <= C). Line 11's strict `<` would
   take one more worker away and leave a process of the node unused.
3. Contention: d' (line 5) depends on eta(D), and D on the d's. We start from the floor and
   raise D to the total the rounded d's ask for until it stops moving (it only grows, since
   eta never rises with load, so this ends). After the decrements, eta at the smaller total is
   higher, so a job may hold a worker it no longer needs; such surplus is handed back so that
   workers which raise no predicted throughput stay idle.

The sort by over-provision (line 8) is computed once, descending, ties in request order; each
pass of the loop decrements every job still above one worker per GPU once, in that order.
"""

from collections.abc import Mapping

from allocator.baselines import NO_SPARE_NOTE, floor_plan
from allocator.throughput import ceil_workers, loader_processes, make_plan, workers_to_keep_up
from allocator.types import AllocationPlan, AllocationRequest


def waa(request: AllocationRequest) -> AllocationPlan:
    """Algorithm 1 with the corrections above."""
    if request.node.cpu_workers <= request.floor_processes:  # lines 1-2
        return floor_plan("waa", request, NO_SPARE_NOTE)
    return make_plan("waa", request, waa_workers(request, pinned={}))


def static(request: AllocationRequest) -> AllocationPlan:
    """WAA decided once at arrival, never changed (the paper's Fig. 8 baseline).

    Jobs that already run keep `current_workers_per_gpu`; the others are planned by WAA
    around them, at least one worker per GPU each.
    """
    pinned = {
        index: job.current_workers_per_gpu
        for index, job in enumerate(request.jobs)
        if job.current_workers_per_gpu is not None
    }
    if request.node.cpu_workers <= request.floor_processes and not pinned:
        return floor_plan("static", request, NO_SPARE_NOTE)
    return make_plan("static", request, waa_workers(request, pinned))


def waa_workers(request: AllocationRequest, pinned: Mapping[int, int]) -> list[int]:
    """Algorithm 1's workers per GPU (request order); jobs in `pinned` keep their count."""
    capacity = request.node.cpu_workers
    workers, needed = _keep_up_split(request, capacity, pinned)  # lines 3-7
    free = [index for index in range(len(workers)) if index not in pinned]
    # Line 8: most over-provisioned first; sorted() is stable, so ties keep request order.
    order = sorted(free, key=lambda i: -(workers[i] - needed[i]))
    total = loader_processes(request, workers)
    while total > capacity:  # lines 9-16
        decremented = False
        for index in order:
            if total <= capacity:  # line 11, corrected from `<`
                break
            if workers[index] > 1:  # lines 13-14
                workers[index] -= 1
                total -= request.jobs[index].gpus
                decremented = True
        if not decremented:
            break  # every free job is at one worker per GPU and pinned ones cannot move
    _return_surplus(request, workers, free)
    return workers


def _keep_up_split(
    request: AllocationRequest, capacity: int, pinned: Mapping[int, int]
) -> tuple[list[int], list[float]]:
    """Lines 3-7 at the contention level the split itself produces (correction 3)."""
    contention = request.node.contention
    total = loader_processes(request, [pinned.get(index, 1) for index in range(len(request.jobs))])
    while True:
        efficiency = contention.efficiency(total)
        needed = [workers_to_keep_up(job, efficiency) for job in request.jobs]
        workers = [
            pinned[index] if index in pinned else ceil_workers(d) for index, d in enumerate(needed)
        ]
        asked = min(capacity, loader_processes(request, workers))
        if asked <= total:
            return workers, needed
        total = asked


def _return_surplus(request: AllocationRequest, workers: list[int], free: list[int]) -> None:
    """Take back workers a job does not need at the final total's (higher) efficiency."""
    contention = request.node.contention
    while True:
        efficiency = contention.efficiency(loader_processes(request, workers))
        changed = False
        for index in free:
            enough = ceil_workers(workers_to_keep_up(request.jobs[index], efficiency))
            if workers[index] > enough:
                workers[index] = enough
                changed = True
        if not changed:
            return
