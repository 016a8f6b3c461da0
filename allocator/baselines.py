"""The paper's three baselines (Sec. II-D): balance, proportion and inverse proportion.

All three first give every GPU one worker, so no job starves; what is left of the node's
capacity is then split, counted in loader processes (gpus * workers_per_gpu). With the
paper's static case (three 2-GPU jobs, 18 processes) `balance` gives (6, 6, 6) processes and
`proportion` (12, 4, 2) as in Fig. 3. `inverse` gives (2, 6, 10) where the paper's hand-made
split was (2, 4, 12): the paper does not say how it rounded, we round by largest remainder.
"""

import math
from collections.abc import Sequence

from allocator.throughput import make_plan
from allocator.types import AllocationPlan, AllocationRequest


def floor_plan(policy: str, request: AllocationRequest, note: str) -> AllocationPlan:
    """One worker per GPU for everybody: what every policy returns when nothing is spare."""
    return make_plan(policy, request, [1] * len(request.jobs), [note])


NO_SPARE_NOTE = "no loader process is spare beyond one worker per GPU"


def balance(request: AllocationRequest) -> AllocationPlan:
    """The same workers per GPU for every job; leftovers go one per GPU in request order."""
    capacity = request.node.cpu_workers
    if not request.jobs:
        return make_plan("balance", request, [])
    if capacity <= request.floor_processes:
        return floor_plan("balance", request, NO_SPARE_NOTE)
    even = capacity // request.floor_processes
    workers = [even] * len(request.jobs)
    used = even * request.floor_processes
    for index, job in enumerate(request.jobs):
        if used + job.gpus <= capacity:
            workers[index] += 1
            used += job.gpus
    return make_plan("balance", request, workers)


def proportion(request: AllocationRequest) -> AllocationPlan:
    """Spare processes split in proportion to model size: bigger models get more."""
    return _split_by_weight("proportion", request, [job.model_params for job in request.jobs])


def inverse(request: AllocationRequest) -> AllocationPlan:
    """Spare processes split in inverse proportion to model size: smaller models get more."""
    return _split_by_weight("inverse", request, [1.0 / job.model_params for job in request.jobs])


def _split_by_weight(
    policy: str, request: AllocationRequest, weights: Sequence[float]
) -> AllocationPlan:
    capacity = request.node.cpu_workers
    if capacity <= request.floor_processes:
        return floor_plan(policy, request, NO_SPARE_NOTE)
    spare = capacity - request.floor_processes
    total_weight = sum(weights)
    ideal = [
        spare * weight / total_weight / job.gpus
        for job, weight in zip(request.jobs, weights, strict=True)
    ]
    extra = [math.floor(share) for share in ideal]
    used = request.floor_processes + sum(
        job.gpus * e for job, e in zip(request.jobs, extra, strict=True)
    )
    # Largest remainder: one more worker per GPU, biggest fractional part first, while it fits.
    by_remainder = sorted(range(len(ideal)), key=lambda i: (-(ideal[i] - extra[i]), i))
    for index in by_remainder:
        gpus = request.jobs[index].gpus
        if used + gpus <= capacity:
            extra[index] += 1
            used += gpus
    return make_plan(policy, request, [1 + e for e in extra])
