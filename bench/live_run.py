"""One run of a workload of real PyTorch jobs through a live daemon, measured: a fresh
daemon as `stoker demo` starts it, the jobs submitted on their schedule, and what the run
took (makespan, throughput, how busy the machine's CPUs were, the CPU seconds of each job,
of the daemon and of the bench) with the plans the daemon made on the way. Also the
datasets such a run trains on. bench/bench_live_gain.py and bench/bench_cpu_sets.py are
made of these runs; bench_live_gain's docstring says how each figure is measured.
"""

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
import psutil

from agents.datafiles import make_dataset
from bench.daemon_driver import Daemon, free_port
from bench.job_cpu import JobCpu
from workloads.live import (
    DEMO_IMAGE_PX,
    FINAL,
    OwnImages,
    RunSpan,
    demo_settings,
    job_body,
    own_images,
)
from workloads.spec import Workload

DEMO_WORKLOAD = Path(__file__).resolve().parents[1] / "configs" / "workloads" / "demo-cpu.toml"


def run_once(
    jobs: Workload,
    dataset: Path,
    policy: str,
    where: Path,
    *,
    cpu_sets: bool = False,
    datasets: Mapping[OwnImages, Path] | None = None,
    gate: bool = False,
) -> dict[str, Any]:
    """One run of the workload under `policy` on a fresh daemon: makespan and throughput.
    `cpu_sets`: each job pinned to its slot's CPUs (`node.cpu_sets`); `datasets`: the
    jobs' own images (`image_px`, `read_latency_ms`)."""
    where.mkdir(parents=True)
    settings = demo_settings(jobs, dataset, policy)
    settings["node"]["cpu_sets"] = cpu_sets
    settings["scheduler"]["gate"] = gate
    daemon = Daemon(where / "state", free_port(), settings).start()
    assert daemon.process is not None
    used = JobCpu(daemon.process.pid)
    serving, polling = psutil.Process(daemon.process.pid), psutil.Process()
    serving_from, polling_from = _own_seconds(serving), _own_seconds(polling)
    before = psutil.cpu_times()
    clocks = [(time.time(), before)]  # the machine's CPU times as the run goes
    try:
        with daemon.client() as client:
            ids = submit(client, jobs, datasets)
            # One request a reading: a fresh daemon's jobs are this run's.
            while not all(job["state"] in FINAL for job in client.get("/v1/jobs").json()):
                used.read()
                time.sleep(0.25)
                clocks.append((time.time(), psutil.cpu_times()))
            after = psutil.cpu_times()
            serving_s = _own_seconds(serving) - serving_from
            polling_s = _own_seconds(polling) - polling_from
            clocks.append((time.time(), after))
            events = client.get("/v1/events", params={"limit": 10_000}).json()
            found = [client.get(f"/v1/jobs/{job_id}").json() for job_id in ids]
    finally:
        daemon.stop()
    run = RunSpan.of(events)
    spent = used.seconds
    unread = [job["name"] for job in found if job["id"] not in spent]
    if unread or used.unreadable:
        raise SystemExit(f"no CPU reading of {unread or 'some agents'}: run the bench as the "
                         "daemon's user or root")  # fmt: skip
    plans, submitted, makespan = list(run.plans), run.submitted, run.makespan_s
    planned_from = min((plan["at"] for plan in plans), default=submitted)
    samples = sum(job["iteration"] * job["batch_size"] for job in found)
    return {
        "makespan_s": makespan,
        "samples_per_s": samples / makespan,
        "cpu_busy": _busy(before, after),  # the whole machine's, from the start to the end
        # From the first plan (the arrival window closed, the same wait under any policy)
        # to the last end: the CPU time a split could put to work.
        "cpu_busy_planned": _busy(
            _read_at(clocks, planned_from, after=True), _read_at(clocks, run.last_end, after=False)
        ),
        "window_s": planned_from - submitted,
        "states": sorted(job["state"] for job in found),
        "predicted_gain": run.planned_gain(),
        "plans": _splits(plans, submitted, {job["id"]: job["name"] for job in found}),
        # Each job's processes' CPU seconds, launch to end (up to a reading short); the
        # daemon's own (not its jobs') and this bench's, from the first submission.
        "cpu_s": {job["name"]: round(spent[job["id"]], 2) for job in found},
        "daemon_cpu_s": round(serving_s, 2),
        "bench_cpu_s": round(polling_s, 2),
    }


def _own_seconds(process: psutil.Process) -> float:
    """A process's own CPU seconds, without those of the children it reaped."""
    times = process.cpu_times()
    return float(times.user + times.system)


def _splits(
    plans: list[dict[str, Any]], submitted: float, names: Mapping[str, str]
) -> list[dict[str, Any]]:
    """Each plan's split by job name, as the policy made it (with the gate on, a change the
    gate held back shows here but did not happen), each job's predicted samples/s, and the
    makespans from then on it predicted under it and under `balance`'s split."""
    return [
        {
            "at_s": round(plan["at"] - submitted, 2),
            "workers": {
                names.get(job_id, job_id): allocation["workers_per_gpu"]
                for job_id, allocation in plan["data"]["allocations"].items()
            },
            "predicted_samples_per_s": {
                names.get(job_id, job_id): round(allocation["predicted_samples_per_s"], 1)
                for job_id, allocation in plan["data"]["allocations"].items()
            },
            **{
                key: plan["data"][key]
                for key in ("predicted_makespan_s", "balance_makespan_s")
                if key in plan["data"]
            },
        }
        for plan in plans
    ]


def _busy(before: Any, after: Any) -> float:
    """The share of the machine's CPU time between two `psutil.cpu_times()` not idle."""
    idle = (after.idle + after.iowait) - (before.idle + before.iowait)
    return float(1.0 - idle / (sum(after) - sum(before)))


def _read_at(clocks: list[tuple[float, Any]], when: float, *, after: bool) -> Any:
    """The CPU times read (every 0.25 s) nearest `when` inside the span they bound: the
    first at or after it for a start, the last at or before it for an end, so that no idle
    second outside the span is counted."""
    if after:
        return next((times for at, times in clocks if at >= when), clocks[-1][1])
    return next((times for at, times in reversed(clocks) if at <= when), clocks[0][1])


def submit(
    client: httpx.Client, jobs: Workload, datasets: Mapping[OwnImages, Path] | None = None
) -> list[str]:
    """Each job at its arrival time; their ids."""
    started = time.monotonic()
    first = min(job.arrival_s for job in jobs.jobs)
    ids = []
    for job in sorted(jobs.jobs, key=lambda job: job.arrival_s):
        time.sleep(max(0.0, job.arrival_s - first - (time.monotonic() - started)))
        reply = client.post("/v1/jobs", json=job_body(job, datasets))
        reply.raise_for_status()
        ids.append(reply.json()["id"])
    return ids


def make_datasets(jobs: Workload, scratch: Path, images: int) -> tuple[Path, dict[OwnImages, Path]]:
    """The run's shared dataset (the demo's images) and a folder for each kind of the jobs'
    own images, `images` JPEGs each."""
    dataset = scratch / "data"
    make_dataset(dataset, images=images, size=DEMO_IMAGE_PX, classes=10)  # as the demo's
    own = {kind: scratch / kind.folder for kind in own_images(jobs)}
    for kind, folder in own.items():
        make_dataset(
            folder,
            images=images,
            size=kind.side_px,
            classes=10,
            read_latency_s=kind.read_latency_s,
        )
    return dataset, own
