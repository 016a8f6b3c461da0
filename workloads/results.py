"""What a simulated run measured, as `stoker simulate --json` prints it (DESIGN.md contract).

- `makespan_s`: first arrival to last end (the paper measures from the first start; with
  every job arriving at 0 the two agree).
- `throughput_samples_per_s`: all samples trained over the makespan.
- `sum_job_samples_per_s`: the sum of every job's own average (samples / its run time), the
  quantity the paper's Fig. 3 adds up.
- `avg_jct_s`: mean of end minus arrival, queueing included.
- `gpu_idle_fraction`: of the GPU-seconds jobs held (from start to end, pauses included),
  the share not spent computing, the computing time coming from the truth's step time.
- `reallocations`: rounds that paused at least one job; `pause_overhead_s`: the seconds
  jobs stood still for them (pause received to running again), summed over jobs.
- `bounds`: the makespan no policy can beat on this run's truth and the throughput none
  can exceed (`workloads/bounds.py`); each job's `true_step_time_s` is what they rest on.
"""

from collections.abc import Sequence
from dataclasses import dataclass

from workloads.bounds import RunBounds


@dataclass(frozen=True)
class JobResult:
    id: str
    arrival_s: float
    start_s: float
    end_s: float
    samples: int
    gpus: int
    gpu_indices: tuple[int, ...]
    busy_gpu_s: float
    paused_s: float
    workers: list[list[float]]  # [time_s, workers_per_gpu]; 0 while not running
    step_time_s: float  # the truth's: alone on its GPUs with loading free, noise included

    @property
    def avg_samples_per_s(self) -> float:
        run = self.end_s - self.start_s
        return self.samples / run if run > 0 else 0.0

    def to_dict(self) -> dict[str, object]:
        return {
            "id": self.id,
            "arrival_s": self.arrival_s,
            "start_s": self.start_s,
            "end_s": self.end_s,
            "jct_s": self.end_s - self.arrival_s,
            "avg_samples_per_s": self.avg_samples_per_s,
            "gpus": self.gpus,
            "gpu_indices": list(self.gpu_indices),
            "paused_s": self.paused_s,
            "workers": self.workers,
            "true_step_time_s": self.step_time_s,
        }


@dataclass(frozen=True)
class SimulationResult:
    policy: str
    seed: int
    workload: str
    makespan_s: float
    throughput_samples_per_s: float
    sum_job_samples_per_s: float
    avg_jct_s: float
    gpu_idle_fraction: float
    reallocations: int
    pauses: int
    plans: int
    gated_changes: int
    pause_overhead_s: float
    jobs: tuple[JobResult, ...]
    tpm: dict[str, object] | None
    bounds: RunBounds

    @classmethod
    def from_jobs(
        cls,
        *,
        policy: str,
        seed: int,
        workload: str,
        jobs: Sequence[JobResult],
        reallocations: int,
        pauses: int,
        plans: int,
        gated_changes: int,
        tpm: dict[str, object] | None,
        bounds: RunBounds,
    ) -> "SimulationResult":
        first = min(job.arrival_s for job in jobs)
        makespan = max(job.end_s for job in jobs) - first
        held = sum(job.gpus * (job.end_s - job.start_s) for job in jobs)
        busy = sum(job.busy_gpu_s for job in jobs)
        return cls(
            policy=policy,
            seed=seed,
            workload=workload,
            makespan_s=makespan,
            throughput_samples_per_s=sum(job.samples for job in jobs) / makespan,
            sum_job_samples_per_s=sum(job.avg_samples_per_s for job in jobs),
            avg_jct_s=sum(job.end_s - job.arrival_s for job in jobs) / len(jobs),
            gpu_idle_fraction=max(0.0, 1.0 - busy / held) if held > 0 else 0.0,
            reallocations=reallocations,
            pauses=pauses,
            plans=plans,
            gated_changes=gated_changes,
            pause_overhead_s=sum(job.paused_s for job in jobs),
            jobs=tuple(jobs),
            tpm=tpm,
            bounds=bounds,
        )

    def to_dict(self) -> dict[str, object]:
        summary: dict[str, object] = {
            "policy": self.policy,
            "seed": self.seed,
            "workload": self.workload,
            "makespan_s": self.makespan_s,
            "throughput_samples_per_s": self.throughput_samples_per_s,
            "sum_job_samples_per_s": self.sum_job_samples_per_s,
            "avg_jct_s": self.avg_jct_s,
            "gpu_idle_fraction": self.gpu_idle_fraction,
            "reallocations": self.reallocations,
            "pauses": self.pauses,
            "plans": self.plans,
            "gated_changes": self.gated_changes,
            "pause_overhead_s": self.pause_overhead_s,
            "jobs": [job.to_dict() for job in self.jobs],
            "bounds": self.bounds.to_dict(),
        }
        if self.tpm is not None:
            summary["tpm"] = _tpm_summary(self.tpm)
        return summary

    def summary(self) -> str:
        """The human-readable report of `stoker simulate` without --json."""
        lines = [
            f"{self.workload} under {self.policy} (seed {self.seed})",
            f"  makespan            {self.makespan_s:10.1f} s",
            f"  throughput          {self.throughput_samples_per_s:10.1f} samples/s "
            f"(sum of job averages {self.sum_job_samples_per_s:.1f})",
            f"  average JCT         {self.avg_jct_s:10.1f} s",
            f"  no policy beats     {self.bounds.makespan_s:10.1f} s makespan, "
            f"{self.bounds.throughput_samples_per_s:.1f} samples/s "
            f"(set by {self.bounds.binding})",
            f"  GPU idle            {self.gpu_idle_fraction:10.1%}",
            f"  reallocations       {self.reallocations:10d} "
            f"({self.pauses} pauses, {self.pause_overhead_s:.1f} s paused, "
            f"{self.gated_changes} changes left alone by the gate)",
            "",
            f"  {'job':<14}{'start s':>9}{'end s':>9}{'samples/s':>11}  workers per GPU over time",
        ]
        for job in self.jobs:
            steps = " ".join(f"{w:g}@{t:.0f}" for t, w in job.workers if w)
            lines.append(
                f"  {job.id:<14}{job.start_s:9.1f}{job.end_s:9.1f}"
                f"{job.avg_samples_per_s:11.1f}  {steps}"
            )
        return "\n".join(lines)


def _tpm_summary(report: dict[str, object]) -> dict[str, object]:
    """The parts of the simulated profiling fit a reader of a run wants."""
    training = report.get("training", {})
    loading = report.get("loading", {})
    assert isinstance(training, dict) and isinstance(loading, dict)
    chosen = training.get("chosen")
    candidates = training.get("candidates", {})
    assert isinstance(candidates, dict)
    return {
        "training_candidate": chosen,
        "training_r2": candidates.get(str(chosen), {}).get("r2"),
        "loading_r2": loading.get("r2"),
        "breakpoints": loading.get("breakpoints"),
    }
