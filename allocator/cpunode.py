"""One budget of cores: what a split of loader workers does on a node that trains on its
CPUs (issue 16, item 7).

On a GPU node the loaders are the CPUs' only users, and a worker more is loading more
(formula 7). On a node without GPUs the jobs train on the cores their loaders run on. There
a worker given to one job takes CPU time from every other: the kernel shares the cores
among the runnable threads, and what one job's threads leave (waiting for a batch, or for a
step) the others get. A split decides how the busy cores are divided among the jobs, far
more than how many are busy. The paper's model, planned on such a node, predicted `balance`
to take twice as long as the default split; measured, the two were within a few per cent
(docs/results.md, item 7).

The model. The jobs' curves give each job's rate x_i under a split, as learned at the
node's sharing now. Job i spends w_i CPU seconds per sample (`JobSpec.cpu_cost_s`,
measured: its training and loading together), so under the split it would keep x_i * w_i
cores busy. The cores the running jobs keep busy now, U, are what the jobs get under any
split (more, up to `NodeSpec.cpu_cores` P, where the split asks for more; never more than
P): every job's rate is scaled by one factor f that spends that budget, sum of f * x_i *
w_i = min(P, max(U, demand)), except that no job runs faster than its threads would with a
core each: its factor stops at 1 / s_i, s_i the share of a core its loader workers get now
when they can run (`JobSpec.core_share`: CPU time over CPU time and run-queue wait, so a
wait on a file is not taken for contention). At the split the jobs run now, f is 1 and the
curves' rates stand (unless they put the jobs over P); a finish frees its cores to the jobs
left, up to their caps. The jobs outside the request (starting, resuming, or held as they
are) are not in U: their cores are taken as free.
"""

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from allocator.types import AllocationRequest

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class CoreBudget:
    """The cores a CPU node's jobs share, and what each job's samples cost in them."""

    cores: float  # P: the CPUs training and loading share
    cost: FloatArray  # w_i, CPU seconds per sample, request order
    fastest: FloatArray  # 1 / s_i: the most a job's rate may be scaled up
    busy_now: float  # U: the cores the running jobs keep busy at their current split

    @classmethod
    def of(
        cls, request: AllocationRequest, rates_now: FloatArray, running: BoolArray
    ) -> "CoreBudget | None":
        """The budget of `request`'s node, given each job's rate at the split it runs now
        (`running` marks the jobs that run); None on a GPU node, or while a job's CPU
        clocks are not measured (the loaders-only model then stands)."""
        cores = request.node.cpu_cores
        if cores is None or not all(job.cpu_clocked for job in request.jobs):
            return None
        cost = np.array([job.cpu_cost_s for job in request.jobs], dtype=np.float64)
        fastest = 1.0 / np.array([job.core_share for job in request.jobs], dtype=np.float64)
        busy_now = float(np.sum(np.where(running, rates_now * cost, 0.0)))
        return cls(cores, cost, fastest, busy_now)

    def spend(self, rates: FloatArray, alive: BoolArray) -> FloatArray:
        """Each row of `rates` (a split's rates, as the curves give them) scaled to spend
        the budget among the `alive` jobs (module docstring)."""
        rows = np.atleast_2d(rates)
        use = rows * (alive * self.cost)  # cores each job keeps busy at factor 1
        demand = use.sum(axis=1)
        # The curves can put the jobs now a little over the node's cores: never more than it.
        budget = np.minimum(self.cores, np.maximum(self.busy_now, demand))
        factor = np.where(demand > 0.0, budget / np.maximum(demand, 1e-300), 1.0)
        # Water-filling: the jobs that reach their fastest stop there, the rest share what
        # they leave. The factor only rises, so one pass per job settles it.
        for _ in range(len(self.cost)):
            capped = (factor[:, None] >= self.fastest[None, :]) & alive
            held = (use * np.where(capped, self.fastest, 0.0)).sum(axis=1)
            free = (use * ~capped).sum(axis=1)
            factor = np.where(free > 0.0, (budget - held) / np.maximum(free, 1e-300), factor)
        scaled: FloatArray = rows * np.minimum(factor[:, None], self.fastest[None, :])
        return scaled if rates.ndim == 2 else scaled[0]
