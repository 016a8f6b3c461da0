"""Whether a fill after a finish can change `lookahead`'s fluid model (allocator/lookahead.py).

After a finish the fluid model hands the freed processes to the jobs left, and a job takes
its growth only if the time it saves over its remaining samples pays its pause. Where no job
fits a worker more, or none could pay its pause even with every free process, the fill's
growth would all be refused: it need not be worked out (a plan's time goes to those fills).
"""

import numpy as np

from allocator.jobarrays import BoolArray, JobArrays
from allocator.knapsack import FloatArray, IntArray
from allocator.throughput import with_overhead


def may_grow(
    jobs: JobArrays,
    split: IntArray,
    alive: BoolArray,
    left: FloatArray,
    before: FloatArray,
    *,
    processes: int,
) -> bool:
    """False where no job left fits a worker more in the free processes, or none could save
    its pause even with every free process, at the node's contention as it is now, on its
    curve's hard min (above the smooth knee): a fill's growth is never more, so all of it
    would be refused and the fill need not be worked out. (On a CPU node a job can run
    faster than its curve: there it always runs.) The alive jobs run `processes`."""
    free = jobs.capacity - processes
    if jobs.cores is not None:
        return True
    if free < np.minimum.reduce(jobs.gpus[alive]):
        return False  # no job left fits a worker more: the fill would hand out nothing
    efficiency = jobs.contention.efficiency(max(processes, 1))
    loading = (split * jobs.gpus + free) * (efficiency / jobs.cost)  # free // g per GPU, or more
    # A margin far above rounding: the rates the fill computes are never above this.
    most = with_overhead(np.minimum(loading, jobs.peak), jobs.overhead) * (1.0 + 1e-9)
    saved = left / before - left / most
    return bool((saved[alive] > jobs.pause_cost[alive]).any())
