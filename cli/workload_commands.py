"""`stoker workload ...`: make workload files, or run one on a live daemon.

`generate` draws a synthetic workload (workloads.generator); `trace` replays the Gavel/Philly
trace onto one node (workloads.trace). Both print the workload's TOML on stdout, or write it
to --out through a temporary file renamed into place. docs/workloads.md has the format.
`run` submits a workload's jobs to a daemon at their arrival times.
"""

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer

from cli.common import fail, print_json, write_atomically
from cli.connection import Daemon, StateDir, Token, Url, detail

# Imported with the CLI, unlike every other command's dependencies: the options' defaults
# are the generator's and the replay's own, and Typer reads them from the signatures. These
# modules are pure Python on scheduler and tpm (no torch, no matplotlib, no simulator).
from workloads.errors import WorkloadError
from workloads.generator import (
    DEFAULT_BATCH_SIZES,
    DEFAULT_GPU_COUNTS,
    DEFAULT_ITERATIONS,
    DEFAULT_MEAN_INTERARRIVAL_S,
    DEFAULT_MODELS,
    GeneratorOptions,
    generate_workload,
)
from workloads.live import FINAL, OwnImages, job_body
from workloads.spec import Workload, dump_workload, load_workload
from workloads.trace import (
    DEFAULT_ITERATION_SCALE,
    DEFAULT_LOAD,
    DEFAULT_TRACE,
    ReplayOptions,
    replay_trace,
)

if TYPE_CHECKING:  # imported when `run` runs
    from rich.progress import Progress

Number = TypeVar("Number", int, float)
# Exit status of `run` when the daemon refused some jobs and ran the others.
SOME_REFUSED = 1

workload_app = typer.Typer(
    help="Make workload files for `stoker simulate`, or run one on a live daemon.",
    no_args_is_help=True,
)

OutOption = Annotated[
    Path | None,
    typer.Option("--out", metavar="FILE.toml", help="write here instead of printing"),
]
NodeGpus = Annotated[int, typer.Option("--gpus", help="GPUs on the node")]
NodeWorkers = Annotated[
    int, typer.Option("--cpu-workers", help="loader processes the node may run (C)")
]


@workload_app.command("generate")
def generate_command(
    *,
    jobs: Annotated[
        int | None, typer.Option(help="how many jobs (default: one per --arrivals time)")
    ] = None,
    seed: Annotated[int, typer.Option(min=0, help="same seed and options, same workload")] = 0,
    mean_interarrival_s: Annotated[
        float | None,
        typer.Option(
            help=f"Poisson arrivals with this mean gap (default {DEFAULT_MEAN_INTERARRIVAL_S:g})"
        ),
    ] = None,
    arrivals: Annotated[
        str | None, typer.Option(metavar="0,120,...", help="given arrival times in seconds")
    ] = None,
    models: Annotated[
        str,
        typer.Option(metavar="NAME,...", help="zoo models to draw from uniformly"),
    ] = ",".join(DEFAULT_MODELS),
    batch_sizes: Annotated[
        str, typer.Option(metavar="B,...", help="per-GPU batch choices; global = B x gpus")
    ] = ",".join(map(str, DEFAULT_BATCH_SIZES)),
    gpu_counts: Annotated[
        str | None,
        typer.Option(
            metavar="N,...",
            help=f"GPUs per job choices (default {','.join(map(str, DEFAULT_GPU_COUNTS))}, "
            "those that fit the node)",
        ),
    ] = None,
    min_iterations: Annotated[int, typer.Option(help="fewest iterations")] = DEFAULT_ITERATIONS[0],
    max_iterations: Annotated[int, typer.Option(help="most iterations")] = DEFAULT_ITERATIONS[1],
    gpus: NodeGpus = 4,
    cpu_workers: NodeWorkers = 18,
    name: Annotated[str | None, typer.Option(help="workload name")] = None,
    out: OutOption = None,
) -> None:
    """Draw a synthetic workload: Poisson (or given) arrivals and a seeded job mix."""
    arrivals_s = _numbers(arrivals, "--arrivals", float) if arrivals is not None else None
    if jobs is None:
        if arrivals_s is None:
            fail("--jobs: say how many jobs to generate (or give --arrivals, one per job)")
        jobs = len(arrivals_s)
    options = GeneratorOptions(
        jobs=jobs,
        seed=seed,
        mean_interarrival_s=mean_interarrival_s,
        arrivals_s=arrivals_s,
        models=tuple(_items(models)),
        batch_sizes=_numbers(batch_sizes, "--batch-sizes", int),
        gpu_counts=_numbers(gpu_counts, "--gpu-counts", int) if gpu_counts is not None else None,
        min_iterations=min_iterations,
        max_iterations=max_iterations,
        gpus=gpus,
        cpu_workers=cpu_workers,
        name=name,
    )
    try:
        workload = generate_workload(options)
    except WorkloadError as error:
        fail(str(error))
    _emit(workload, out)


@workload_app.command("trace")
def trace_command(
    trace: Annotated[
        Path | None,
        typer.Argument(metavar="[TRACE.tsv]", help="a Gavel trace (default: the shipped one)"),
    ] = None,
    *,
    gpus: NodeGpus = 4,
    cpu_workers: NodeWorkers = 18,
    load: Annotated[
        float, typer.Option(help="offered load to aim for, a fraction of the node's GPU time")
    ] = DEFAULT_LOAD,
    iteration_scale: Annotated[
        float, typer.Option(help="iterations = round(trace steps x this), at least 1")
    ] = DEFAULT_ITERATION_SCALE,
    limit: Annotated[
        int | None, typer.Option(metavar="N", help="only the first N jobs that fit the node")
    ] = None,
    out: OutOption = None,
) -> None:
    """Replay the Gavel/Philly trace onto one node (docs/workloads.md says how)."""
    options = ReplayOptions(
        gpus=gpus,
        cpu_workers=cpu_workers,
        load=load,
        iteration_scale=iteration_scale,
        limit=limit,
    )
    try:
        workload = replay_trace(trace or DEFAULT_TRACE, options)
    except WorkloadError as error:
        fail(str(error))
    _emit(workload, out)


def _items(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def _numbers(text: str, option: str, kind: type[Number]) -> tuple[Number, ...]:
    values: list[Number] = []
    for item in _items(text):
        try:
            values.append(kind(item))
        except ValueError:
            word = "whole number" if kind is int else "number"
            fail(f"{option}: {item!r} is not a {word}; give a comma-separated list")
    return tuple(values)


def _emit(workload: Workload, out: Path | None) -> None:
    text = dump_workload(workload)
    if out is None:
        typer.echo(text, nl=False)
        return
    write_atomically(out, text, "workload")
    typer.echo(f"wrote {len(workload.jobs)} jobs to {out}")


@workload_app.command("run")
def run_command(
    workload_file: Annotated[Path, typer.Argument(metavar="WORKLOAD.toml")],
    *,
    speed: Annotated[
        float, typer.Option(help="time compression: 10 submits ten times faster")
    ] = 1.0,
    wait: Annotated[bool, typer.Option(help="wait for every job to end")] = True,
    url: Url = None,
    token: Token = None,
    state_dir: StateDir = None,
) -> None:
    """Submit a workload's jobs to a live daemon at their arrival times, with progress. A
    job the daemon refuses is reported with its reason and the others go on; the JSON lists
    both, and the exit status is 1 when any job was refused."""
    if not speed > 0:
        fail(f"--speed must be positive, got {speed}")
    try:
        workload = load_workload(workload_file)
    except WorkloadError as error:
        fail(str(error))
    daemon = Daemon(url, token, state_dir)
    outcome = submit_on_schedule(daemon, workload, speed)
    if wait and outcome.ids:
        _wait_for(daemon, outcome.ids)
    print_json({"workload": workload.name, "jobs": outcome.ids, "refused": outcome.refused})
    typer.echo(outcome.summary(), err=True)
    if outcome.refused:
        raise typer.Exit(SOME_REFUSED)


@dataclass
class Submissions:
    """What the daemon made of a workload's jobs, by their ids in the workload file."""

    ids: dict[str, str] = field(default_factory=dict)  # accepted: -> the daemon's job id
    refused: dict[str, str] = field(default_factory=dict)  # -> the daemon's reason

    def summary(self) -> str:
        done = f"submitted {len(self.ids)} of {len(self.ids) + len(self.refused)} jobs"
        if not self.refused:
            return done
        reasons = "".join(f"\n  {job}: {reason}" for job, reason in self.refused.items())
        return f"{done}; refused {len(self.refused)}:{reasons}"


def submit_on_schedule(
    daemon: Daemon,
    workload: Workload,
    speed: float,
    *,
    progress: bool = True,
    datasets: Mapping[OwnImages, Path] | None = None,
) -> Submissions:
    """Submit each job at its arrival time divided by `speed`. A job the daemon refuses
    (422: the job itself is wrong for this node) is said at once and the next one goes on;
    any other error stops the run, as it would stop every later job too. `datasets`: the
    folders of the jobs' own images (`image_px`, `read_latency_ms`); without, such a job
    stops the run before anything is submitted."""
    try:
        bodies = {job.id: job_body(job, datasets) for job in workload.jobs}
    except WorkloadError as error:
        fail(str(error))
    outcome = Submissions()
    started = time.monotonic()
    first = min(job.arrival_s for job in workload.jobs)
    with _progress(disable=not progress) as bar:
        task = bar.add_task("submitted", total=len(workload.jobs))
        for job in sorted(workload.jobs, key=lambda job: job.arrival_s):
            delay = (job.arrival_s - first) / speed - (time.monotonic() - started)
            if delay > 0:
                time.sleep(delay)
            reply = daemon.request("POST", "/v1/jobs", bodies[job.id])
            if reply.status_code == 422:
                outcome.refused[job.id] = reason = detail(reply)
                gpus = f"{job.gpus} GPU{'s' * (job.gpus > 1)}"
                said = f"refused {job.id} ({job.model}, {gpus}): {reason}"
                bar.console.print(said, markup=False, highlight=False, soft_wrap=True)
            elif reply.status_code >= 400:
                fail(f"POST /v1/jobs ({job.id}): {reply.status_code} {detail(reply)}")
            else:
                outcome.ids[job.id] = reply.json()["id"]
            bar.advance(task)
    return outcome


def _wait_for(daemon: Daemon, ids: dict[str, str]) -> None:
    with _progress() as bar:
        task = bar.add_task("ended", total=len(ids))
        while True:
            states = {job["id"]: job["state"] for job in daemon.every_page("/v1/jobs")}
            ended = sum(states.get(job_id) in FINAL for job_id in ids.values())
            bar.update(task, completed=ended)
            if ended == len(ids):
                return
            time.sleep(0.5)


def _progress(*, disable: bool = False) -> "Progress":
    from rich.console import Console  # noqa: PLC0415 (only the progress bars need rich)
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn  # noqa: PLC0415

    return Progress(
        TextColumn("{task.description:>10}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=Console(stderr=True),  # stdout is for the JSON result
        transient=False,
        disable=disable,
    )
