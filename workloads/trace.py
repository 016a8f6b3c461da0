"""Replay of the Gavel/Philly job trace (workloads/traces/gavel-msr-seed0-0e4a51.tsv) onto one node.

The trace holds 1,181 jobs of a whole cluster (docs/workloads.md, workloads/traces/README.md).
A replay onto one node of G GPUs does, in this order:

1. Filter: keep the jobs whose scale factor (GPUs) is at most G; on 4 GPUs the 68 eight-GPU
   jobs go and 1,113 remain. `limit` then keeps the first N kept jobs, in trace order.
2. Map each job type to a zoo model (`TRACE_MODELS`), keeping the trace's batch size as the
   job's global batch. The two image types map to themselves; the others to an image model
   of comparable compute per sample:
   ResNet-18 -> Resnet18, ResNet-50 -> Resnet50, Transformer -> Resnet34, LM -> VGG11,
   Recommendation -> smResnet20, CycleGAN -> VGG16, A3C -> smVGG7.
   A3C and CycleGAN carry no batch size in the trace; they get `UNSTATED_BATCH_SIZE` (32).
   The per-GPU batch is capped at `MAX_BATCH_PER_GPU` (256, the largest image batch in the
   trace): only Recommendation's 512 to 8,192 batches are cut, and their step counts stay
   as the trace has them.
3. Scale steps: iterations = max(1, round(steps x iteration_scale)). The default 0.001
   turns the median kept job from about 63 hours of GPU time into about 4 minutes.
4. Scale time: arrivals are shifted so the first kept job arrives at 0 s, then multiplied by
   one factor chosen so that the offered load, (jobs - 1) / span x mean GPU-seconds per job
   / G, equals `load` (default 0.9). A job's GPU-seconds are gpus x iterations x
   `NodeTruth().step_time_s` with its zoo features: GPU work alone, without loading stalls
   or launch and pause costs, so the node's real utilisation demand is somewhat higher.

Every job gets `gpus` from its scale factor, no `gpu_indices`, `node.max_jobs_per_gpu` = 1,
and the id `t<line>` (its line in the trace). The workload's `description` records every
choice above with the numbers the replay used.
"""

import math
import re
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workloads.errors import WorkloadError
from workloads.spec import Workload, check_node_options, parse_workload
from workloads.truth import NodeTruth

DEFAULT_TRACE = Path(__file__).resolve().parent / "traces" / "gavel-msr-seed0-0e4a51.tsv"
TRACE_MODELS = {
    "ResNet-18": "Resnet18",
    "ResNet-50": "Resnet50",
    "Transformer": "Resnet34",
    "LM": "VGG11",
    "Recommendation": "smResnet20",
    "CycleGAN": "VGG16",
    "A3C": "smVGG7",
}
UNSTATED_BATCH_SIZE = 32  # A3C and CycleGAN: the trace names no batch size
MAX_BATCH_PER_GPU = 256
DEFAULT_ITERATION_SCALE = 0.001
DEFAULT_LOAD = 0.9

_FIELDS = 7
_JOB_TYPE = re.compile(r"^(?P<family>[^(]+?)(?:\s*\(batch size (?P<batch>\d+)\))?$")


@dataclass(frozen=True)
class TraceJob:
    """One line of the trace, the fields a replay uses."""

    line: int
    job_type: str  # the family, e.g. "ResNet-18"
    batch_size: int | None  # global; None where the trace gives none
    steps: int
    arrival_s: float
    gpus: int  # the scale factor


@dataclass(frozen=True)
class ReplayOptions:
    """How to fit the trace to one node. Field names match the CLI's options."""

    gpus: int = 4
    cpu_workers: int = 18
    load: float = DEFAULT_LOAD
    iteration_scale: float = DEFAULT_ITERATION_SCALE
    limit: int | None = None


def read_trace(path: Path) -> list[TraceJob]:
    """Every job of a Gavel trace file; WorkloadError names the file and line of a problem."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise WorkloadError(str(path), "no such trace file") from None
    except IsADirectoryError:
        raise WorkloadError(str(path), "is a directory, expected a trace file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise WorkloadError(str(path), f"cannot read the trace: {error}") from None
    jobs = [
        _parse_line(raw, f"{path}:{number}", number)
        for number, raw in enumerate(text.splitlines(), start=1)
        if raw.strip()
    ]
    if not jobs:
        raise WorkloadError(str(path), "the trace holds no jobs")
    return jobs


def _parse_line(raw: str, where: str, number: int) -> TraceJob:
    fields = raw.split("\t")
    if len(fields) != _FIELDS:
        raise WorkloadError(
            where,
            f"has {len(fields)} tab-separated fields, expected {_FIELDS} (job type, command, "
            "steps flag, data flag, total steps, arrival time, scale factor)",
        )
    match = _JOB_TYPE.match(fields[0].strip())
    family = match["family"] if match else fields[0]
    if match is None or family not in TRACE_MODELS:
        raise WorkloadError(
            where,
            f"unknown job type {fields[0]!r}; known: {', '.join(TRACE_MODELS)}, "
            "each optionally followed by ' (batch size N)'",
        )
    batch = int(match["batch"]) if match["batch"] else None
    if batch is not None and batch < 1:
        raise WorkloadError(where, f"batch size {batch} in {fields[0]!r}; use at least 1")
    steps = _whole(fields[4], where, "field 5 (total steps)")
    gpus = _whole(fields[6], where, "field 7 (scale factor)")
    try:
        arrival_s = float(fields[5])
    except ValueError:
        arrival_s = math.nan
    if not (math.isfinite(arrival_s) and arrival_s >= 0):
        raise WorkloadError(
            where, f"field 6 (arrival time) is {fields[5]!r}; expected seconds >= 0"
        )
    return TraceJob(number, family, batch, steps, arrival_s, gpus)


def _whole(text: str, where: str, what: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        value = 0
    if value < 1:
        raise WorkloadError(where, f"{what} is {text!r}; expected a whole number >= 1")
    return value


def replay_trace(path: Path = DEFAULT_TRACE, options: ReplayOptions | None = None) -> Workload:
    """The trace as a workload for one node, filtered, mapped and scaled as the module says."""
    options = options or ReplayOptions()
    _check(options)
    everything = read_trace(path)
    fitting = [job for job in everything if job.gpus <= options.gpus]
    if not fitting:
        raise WorkloadError(
            "--gpus", f"no job in {path} fits a node of {options.gpus} GPUs; raise --gpus"
        )
    kept = fitting[: options.limit] if options.limit is not None else fitting
    # Jobs first, all arriving at 0 s: their GPU work sets the time scale of the arrivals.
    draft = parse_workload(
        {
            "name": f"trace-{path.stem}",
            "node": {
                "gpus": options.gpus,
                "cpu_workers": options.cpu_workers,
                "max_jobs_per_gpu": 1,
            },
            "jobs": [_workload_job(job, options.iteration_scale) for job in kept],
        },
        f"replay of {path}",
    )
    truth = NodeTruth()
    # GPU work by the truth's unshared step time: no loading stalls, no pauses.
    gpu_seconds = [job.gpus * job.iterations * job.step_time_s(truth) for job in draft.jobs]
    start = min(job.arrival_s for job in kept)
    span = max(job.arrival_s for job in kept) - start
    time_factor = None
    if len(kept) > 1 and span > 0:
        compressed = (len(kept) - 1) * statistics.fmean(gpu_seconds) / (options.gpus * options.load)
        time_factor = compressed / span
    # Arrivals computed here are seconds >= 0, so the jobs need no second validation.
    jobs = tuple(
        job.model_copy(
            update={"arrival_s": round((trace_job.arrival_s - start) * (time_factor or 0.0), 3)}
        )
        for job, trace_job in zip(draft.jobs, kept, strict=True)
    )
    description = _description(
        path,
        options,
        total=len(everything),
        fitting=len(fitting),
        kept=kept,
        capped=sum(
            job.batch_size < _wanted_batch(trace_job)
            for job, trace_job in zip(jobs, kept, strict=True)
        ),
        span=span,
        time_factor=time_factor,
        median_job_s=statistics.median(
            seconds / job.gpus for seconds, job in zip(gpu_seconds, jobs, strict=True)
        ),
    )
    return draft.model_copy(update={"jobs": jobs, "description": description})


def _wanted_batch(job: TraceJob) -> int:
    return job.batch_size or UNSTATED_BATCH_SIZE


def _workload_job(job: TraceJob, iteration_scale: float) -> dict[str, Any]:
    """A trace job as a workload job, mapped and scaled; arrival_s is set by the caller."""
    return {
        "id": f"t{job.line:04d}",
        "model": TRACE_MODELS[job.job_type],
        "batch_size": max(job.gpus, min(_wanted_batch(job), MAX_BATCH_PER_GPU * job.gpus)),
        "gpus": job.gpus,
        "iterations": max(1, round(job.steps * iteration_scale)),
    }


def _check(options: ReplayOptions) -> None:
    check_node_options(options.gpus, options.cpu_workers)
    if not (math.isfinite(options.load) and options.load > 0):
        raise WorkloadError(
            "--load", f"must be a positive fraction of the node's GPU time, got {options.load}"
        )
    if not (math.isfinite(options.iteration_scale) and options.iteration_scale > 0):
        raise WorkloadError(
            "--iteration-scale", f"must be a positive factor, got {options.iteration_scale}"
        )
    if options.limit is not None and options.limit < 1:
        raise WorkloadError("--limit", f"must be at least 1, got {options.limit}")


def _description(
    path: Path,
    options: ReplayOptions,
    *,
    total: int,
    fitting: int,
    kept: list[TraceJob],
    capped: int,
    span: float,
    time_factor: float | None,
    median_job_s: float,
) -> str:
    present = [family for family in TRACE_MODELS if any(job.job_type == family for job in kept)]
    mapping = ", ".join(f"{family} -> {TRACE_MODELS[family]}" for family in present)
    limited = f"; first {len(kept)} of them (--limit)" if len(kept) < fitting else ""
    if time_factor is None:
        timing = "all kept jobs arrive at one instant: arrivals at 0 s, no load target"
    else:
        timing = (
            f"arrivals shifted to start at 0 s and multiplied by {time_factor:.6g} "
            f"(trace span {span:,.0f} s -> {span * time_factor:,.0f} s) so that the offered "
            f"load is {options.load:g} of the node's GPU time, estimated as "
            "(jobs - 1) / span x mean job GPU-seconds / GPUs with NodeTruth().step_time_s "
            "and zoo features (GPU work only, no loading stalls)"
        )
    return (
        f"Gavel/Philly trace {path.name} replayed onto one node ({options.gpus} GPUs, "
        f"{options.cpu_workers} loader processes): kept {fitting:,} of {total:,} jobs "
        f"(dropped {total - fitting:,} needing more GPUs than the node has){limited}; "
        f"job types mapped to zoo models with the trace's global batch: {mapping}; "
        f"A3C and CycleGAN (no batch size in the trace) at batch {UNSTATED_BATCH_SIZE}; "
        f"per-GPU batch capped at {MAX_BATCH_PER_GPU} (jobs capped: {capped}, their steps "
        f"unchanged); iterations = max(1, round(steps x {options.iteration_scale:g})), "
        f"median job {median_job_s / 60:.1f} min of GPU step time; {timing}; gpus from the "
        "scale factor, no gpu_indices, max_jobs_per_gpu 1; job id t<line in the trace>"
    )
