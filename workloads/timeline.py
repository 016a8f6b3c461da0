"""Worker allocation over time, drawn like the paper's Fig. 8 and 9.

Each job is a band whose height is the loader processes it runs (GPUs x workers per GPU)
and whose length is its run; bands are stacked, so the top edge is the node's busy loader
processes, against the dashed line of its capacity C. Dotted lines mark arrivals.
"""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: never open a window
import matplotlib.pyplot as plt
import numpy as np

from workloads.results import JobResult, SimulationResult


def processes_at(job: JobResult, times: np.ndarray) -> np.ndarray:
    """The job's loader processes at each time (the last change at or before it)."""
    if not job.workers:
        return np.zeros_like(times)
    changes = np.array([t for t, _ in job.workers])
    levels = np.array([w for _, w in job.workers]) * job.gpus
    index = np.searchsorted(changes, times, side="right") - 1
    return np.where(index >= 0, levels[np.clip(index, 0, None)], 0.0)


def draw_timeline(result: SimulationResult, path: Path, *, cpu_workers: int) -> None:
    """Write the picture of `result` to `path` (PNG, or any format matplotlib knows)."""
    times = np.unique([t for job in result.jobs for t, _ in job.workers] + [0.0])
    figure, axes = plt.subplots(figsize=(11, 4.2), dpi=110)
    lower = np.zeros_like(times)
    colours = plt.get_cmap("tab20")
    for index, job in enumerate(result.jobs):
        upper = lower + processes_at(job, times)
        axes.fill_between(
            times, lower, upper, step="post", color=colours(index % 20), label=job.id, lw=0
        )
        lower = upper
    for job in result.jobs:
        axes.axvline(job.arrival_s, color="0.6", lw=0.6, ls=":")
    axes.axhline(cpu_workers, color="black", lw=1, ls="--", label=f"C = {cpu_workers}")
    axes.set_xlim(0, max(job.end_s for job in result.jobs))
    axes.set_ylim(0, max(cpu_workers, float(lower.max(initial=0.0))) * 1.1)
    axes.set_xlabel("time (s)")
    axes.set_ylabel("loader processes")
    axes.set_title(
        f"{result.workload} under {result.policy}: makespan {result.makespan_s:.0f} s, "
        f"{result.throughput_samples_per_s:.0f} samples/s, "
        f"{result.reallocations} reallocations"
    )
    axes.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
