"""`lookahead`'s jobs as arrays: the constants its fluid model and its fill read, per job
in request order, and what a split of workers yields on the node they share."""

from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from allocator.contention import ContentionCurve
from allocator.cpunode import CoreBudget
from allocator.knapsack import FloatArray, IntArray
from allocator.ratetable import RateTable
from allocator.throughput import with_overhead
from allocator.types import AllocationRequest

BoolArray = npt.NDArray[np.bool_]

# The sharpness p of the knee. A job whose loaders deliver exactly its GPU's rate runs at
# 2^(-1/p) of it: 0.917 at 8. This is the simulator's calibrated truth (workloads/truth.py),
# not yet learned from a job's own telemetry.
KNEE_SHARPNESS = 8.0
# Before a job has been paused once: the scheduler's default (paper Sec. IV-B).
DEFAULT_PAUSE_COST_S = 16.0


@dataclass(frozen=True)
class JobArrays:
    """Per-job constants as arrays, in request order, and the node they share."""

    gpus: IntArray
    cost: FloatArray  # c_i, seconds per sample per worker
    peak: FloatArray  # B_i * mu_i: what the GPUs allow
    remaining: FloatArray  # samples left (1 where unknown: only `greedy` is used then)
    current: IntArray  # workers per GPU now; 0 for a job not running
    pause_cost: FloatArray  # seconds a change of workers stops the job
    sharpness: FloatArray  # p of each job's knee: its own where known, else KNEE_SHARPNESS
    overhead: FloatArray  # each job's waits no worker shortens, seconds per sample
    capacity: int
    contention: ContentionCurve
    regrow_delay: float  # seconds from a finish to the plan that hands its processes on
    # On a node that trains on its CPUs, the cores every split shares (allocator/cpunode.py).
    cores: CoreBudget | None = None
    # Elsewhere, every rate a fill asks for, looked up (allocator/ratetable.py).
    table: RateTable | None = None

    @classmethod
    def of(cls, request: AllocationRequest) -> "JobArrays":
        jobs = request.jobs
        planned = cls(
            gpus=np.array([job.gpus for job in jobs], dtype=np.int64),
            cost=np.array([job.sample_cost_s for job in jobs]),
            peak=np.array([job.max_samples_per_s for job in jobs]),
            remaining=np.array([max(1.0, job.remaining_samples or 0.0) for job in jobs]),
            current=np.array([job.current_workers_per_gpu or 0 for job in jobs], dtype=np.int64),
            pause_cost=np.array(
                [
                    DEFAULT_PAUSE_COST_S if job.pause_cost_s is None else job.pause_cost_s
                    for job in jobs
                ]
            ),
            sharpness=np.array([job.knee_sharpness or KNEE_SHARPNESS for job in jobs]),
            overhead=np.array([job.overhead_s for job in jobs]),
            capacity=request.node.cpu_workers,
            contention=request.node.contention,
            regrow_delay=request.regrow_delay_s,
        )
        running = planned.current > 0
        now = planned.rates(np.where(running, planned.current, 1), running)
        cores = CoreBudget.of(request, now, running)
        if cores is not None:
            return replace(planned, cores=cores)
        table = RateTable(
            planned.gpus,
            planned.cost,
            planned.peak,
            planned.sharpness,
            planned.overhead,
            planned.capacity,
            planned.contention,
        )
        return replace(planned, table=table)

    def rates(self, splits: IntArray, alive: BoolArray, total: int | None = None) -> FloatArray:
        """Samples/s of every job under each split (rows), counting the loader processes of
        the `alive` jobs only (`total` of them, of one split, where the caller knows it)."""
        if self.table is not None and splits.ndim == 1:  # the fluid model's one split
            if total is None:
                total = int((splits * alive) @ self.gpus)
            one = self.table.rates_of(splits, total)
            if one is not None:
                return one
        splits_2d = np.atleast_2d(splits)
        processes = (splits_2d * alive) @ self.gpus
        looked_up = None if self.table is None else self.table.rates(splits_2d, processes)
        if looked_up is not None:
            return looked_up if splits.ndim == 2 else looked_up[0]
        efficiency = self.contention.efficiencies(np.maximum(processes, 1))[:, None]
        loading = np.maximum(self.gpus * splits_2d * efficiency / self.cost, 1e-12)
        power = -self.sharpness
        steady: FloatArray = (loading**power + self.peak**power) ** (1.0 / power)
        rates = with_overhead(steady, self.overhead)
        if self.cores is not None:
            rates = self.cores.spend(rates, alive)
        return rates if splits.ndim == 2 else rates[0]
