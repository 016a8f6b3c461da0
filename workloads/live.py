"""A workload run for real through a live daemon, as `stoker workload run`, `stoker demo`
and bench/bench_live_gain.py run one: each job's body for `POST /v1/jobs`, the states in
which a job has ended, and the daemon settings of the demo (its workload's node as CPU
training slots, short windows, the gate off, real application masters on a dataset).
Plain data: nothing here talks to a daemon."""

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scheduler.config import DEFAULT_POLICY
from workloads.errors import WorkloadError
from workloads.spec import Workload, WorkloadJob

FINAL = frozenset({"completed", "failed", "cancelled"})


DEMO_IMAGE_PX = 48  # the side of the images `stoker demo` and the bench make for every job
DEFAULT_DATASET_IMAGES = 256  # JPEGs in each of their datasets, unless the workload says


def dataset_images(workload: Workload, given: int | None = None) -> int:
    """JPEGs in each dataset a live run of `workload` makes: `given` (a command-line
    option), else the workload's `dataset_images`, else `DEFAULT_DATASET_IMAGES`."""
    if given is not None:
        return given
    return workload.dataset_images or DEFAULT_DATASET_IMAGES


@dataclass(frozen=True, order=True)
class OwnImages:
    """JPEGs a job of a live run brings (`image_px`, `read_latency_ms`): their side, and
    the wait of every read when they lie on an emulated remote store."""

    side_px: int
    read_latency_ms: float = 0.0

    @classmethod
    def of(cls, job: WorkloadJob) -> "OwnImages | None":
        """The images `job` brings; None when it trains on the run's shared dataset."""
        if job.image_px is None and not job.read_latency_ms:
            return None
        return cls(job.image_px or DEMO_IMAGE_PX, job.read_latency_ms or 0.0)

    @property
    def folder(self) -> str:
        """A folder name that tells these images from the others of the run."""
        remote = f"-remote-{self.read_latency_ms:g}ms" if self.read_latency_ms else ""
        return f"data-{self.side_px}px{remote}"

    @property
    def read_latency_s(self) -> float:
        """The wait of every read, as `agents.data.make_dataset` takes it."""
        return self.read_latency_ms / 1000

    def describe(self) -> str:
        """The images in words: their side, and the wait of each read where they wait."""
        remote = f", reads waiting {self.read_latency_ms:g} ms" if self.read_latency_ms else ""
        return f"{self.side_px} px{remote}"


def own_images(workload: Workload) -> list[OwnImages]:
    """The images the workload's jobs bring, each once."""
    return sorted({own for job in workload.jobs if (own := OwnImages.of(job)) is not None})


def job_body(job: WorkloadJob, datasets: Mapping[OwnImages, Path] | None = None) -> dict[str, Any]:
    """What `POST /v1/jobs` takes for one of a workload's jobs; `datasets`: the folders
    made for the jobs' own images (`own_images`)."""
    body: dict[str, Any] = {
        "name": job.id,
        "model": job.model,
        "batch_size": job.batch_size,
        "gpus": job.gpus,
        "iterations": job.iterations,
    }
    if job.gpu_indices is not None:
        body["gpu_indices"] = list(job.gpu_indices)
    own = OwnImages.of(job)
    if own is not None:
        if datasets is None or own not in datasets:
            field = "image_px" if job.image_px is not None else "read_latency_ms"
            raise WorkloadError(
                f"jobs[{job.id}].{field}",
                "only `stoker demo --workload` and bench/bench_live_gain.py make a job's own"
                " images; leave image_px and read_latency_ms out to run on the daemon's"
                " default dataset",
            )
        body["dataset"] = str(datasets[own])
    return body


def demo_settings(jobs: Workload, dataset: Path, policy: str = DEFAULT_POLICY) -> dict[str, Any]:
    """The daemon `stoker demo` runs `jobs` on, planning with `policy` (its state dir and
    port are the caller's)."""
    return {
        "agent_mode": "process",
        "heartbeat_s": 0.5,
        # GPUs if NVML finds any, else the workload's GPU count as CPU training slots.
        "node": {"cpu_slots": jobs.node.gpus, "cpu_workers": jobs.node.cpu_workers},
        # Short windows; the gate off, so that every change the plan makes shows.
        "scheduler": {
            "arrival_window_s": 2.0,
            "completion_window_s": 2.0,
            "replan_window_s": 2.0,  # four heartbeats: jobs of seconds cannot wait 15
            "gate": False,
            "policy": policy,
        },
        "training": {"default_dataset": str(dataset), "image_size": 32},
    }


@dataclass(frozen=True)
class RunSpan:
    """A live run of a workload as its daemon's events tell it: the first submission, the
    first and last job's end, and the plans made."""

    submitted: float
    first_end: float
    last_end: float
    plans: tuple[dict[str, Any], ...]

    @classmethod
    def of(cls, events: list[dict[str, Any]]) -> "RunSpan":
        ended = [
            event["at"]
            for event in events
            if event["kind"] == "state" and event["data"].get("to") in FINAL
        ]
        return cls(
            submitted=min(event["at"] for event in events if event["kind"] == "submitted"),
            first_end=min(ended),
            last_end=max(ended),
            plans=tuple(event for event in events if event["kind"] == "plan"),
        )

    @property
    def makespan_s(self) -> float:
        return self.last_end - self.submitted

    def planned_gain(self) -> float | None:
        """What the default policy's own plans predicted it gains over balance, from the
        plan where its run departed from the one `balance` would have run: the first plan
        whose split is not `balance`'s (`balance_workers`). Up to it both runs are the same,
        so its two predicted makespans, each with the time until then added, are the whole
        runs'; a later plan predicts only what is left to gain from a run already ahead.
        0.0 when no plan departed. None under `balance`, and where the plans do not tell
        (one that does not say balance's split or its makespans comes first). With the gate
        on, a departure the gate held back counts as one: the plans are the policy's."""
        if not any("balance_workers" in plan["data"] for plan in self.plans):
            return None  # balance's own plans
        for plan in sorted(self.plans, key=lambda plan: plan["at"]):
            data = plan["data"]
            if "balance_workers" not in data:
                return None  # this plan may have departed: nothing tells
            if not _departs(data):
                continue
            if "predicted_makespan_s" not in data or "balance_makespan_s" not in data:
                return None
            so_far = plan["at"] - self.submitted
            ours, shared = data["predicted_makespan_s"], data["balance_makespan_s"]
            return float((so_far + shared) / (so_far + ours) - 1.0)
        return 0.0


def _departs(plan: Mapping[str, Any]) -> bool:
    """The plan's split is not the `balance_workers` it names."""
    chosen = {job: given["workers_per_gpu"] for job, given in plan["allocations"].items()}
    return bool(chosen != plan["balance_workers"])
