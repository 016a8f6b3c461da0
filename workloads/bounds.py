"""What no policy can beat on a simulated run: a makespan floor and a throughput ceiling.

Both come from the truth alone, so they hold for every allocation, `oracle` included, and
they tell a reader whether a goal is out of reach before any policy is blamed:

- GPU floor: a job cannot end before its arrival plus its iterations at its own step time on
  unshared GPUs with loading free. The truth's rate is a soft minimum of loading and GPU
  rates, and sharing a GPU only slows a job, so nothing runs faster than that.
- Loading floor: the node's D loader processes deliver capacity(D) worker-equivalents, at
  most capacity(cpu_workers) since capacity grows with D. A sample of pipeline p takes c_p
  of them, so the jobs that arrive at or after t cannot all be loaded before
  t + sum(samples x c_p) / capacity(cpu_workers), for every arrival time t. A job with
  its own measured curve counts its cheapest point's worker-seconds per sample. A decoder of K
  samples/s saves at most K x (c_p - c'_p) worker-seconds a second (the decode part of the
  dearest pipeline), which the floor adds to the node's loading capacity.

Launch, pause and resume costs and waiting for GPUs are left out, which keeps both bounds
safe at the price of some slack: the makespan floor is the larger of the two, and the
throughput ceiling is all samples over that floor (the run's throughput is all samples over
its makespan, `workloads/results.py`).
"""

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from scheduler.messages import DEFAULT_PIPELINE
from workloads.spec import WorkloadJob
from workloads.truth import NodeTruth


@dataclass(frozen=True)
class RunBounds:
    makespan_s: float  # no run of these jobs on this node ends sooner (from the first arrival)
    throughput_samples_per_s: float  # no run trains faster over its makespan
    binding: str  # what sets the floor: "loading", or "gpu:<job id>"

    def to_dict(self) -> dict[str, object]:
        return {
            "makespan_s": self.makespan_s,
            "throughput_samples_per_s": self.throughput_samples_per_s,
            "binding": self.binding,
        }


def run_bounds(
    truth: NodeTruth,
    cpu_workers: int,
    jobs: Sequence[WorkloadJob],
    step_time_s: Mapping[str, float],
) -> RunBounds:
    """The floor and ceiling for `jobs` on a node of `cpu_workers` loader processes.

    `step_time_s` is each job's true step time on unshared GPUs, its own noise included, as
    the simulator drew it.
    """
    first = min(job.arrival_s for job in jobs)
    gpu_end, gpu_job = max(
        (job.arrival_s + job.iterations * step_time_s[job.id], job.id) for job in jobs
    )
    per_s = truth.capacity(cpu_workers)  # worker-seconds of loading the node gives per second
    if truth.decoder_cores > 0:
        decode = max(truth.cost(job.pipeline) - truth.device_cost(job.pipeline) for job in jobs)
        per_s += truth.decoder_capacity(DEFAULT_PIPELINE) * decode
    load_end, later_work = -math.inf, 0.0  # worker-seconds of the jobs arriving from then on
    for job in sorted(jobs, key=lambda job: job.arrival_s, reverse=True):
        later_work += job.iterations * job.batch_size * job.cheapest_cost_s(truth)
        load_end = max(load_end, job.arrival_s + later_work / per_s)
    floor = max(gpu_end, load_end) - first
    samples = sum(job.iterations * job.batch_size for job in jobs)
    return RunBounds(
        makespan_s=floor,
        throughput_samples_per_s=samples / floor,
        binding=f"gpu:{gpu_job}" if gpu_end >= load_end else "loading",
    )
