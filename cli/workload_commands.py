"""`stoker workload ...`: make workload files.

`generate` draws a synthetic workload (workloads.generator); `trace` replays the Gavel/Philly
trace onto one node (workloads.trace). Both print the workload's TOML on stdout, or write it
to --out through a temporary file renamed into place. docs/workloads.md has the format.
"""

from pathlib import Path
from typing import Annotated, TypeVar

import typer

from cli.common import fail, write_atomically

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
from workloads.spec import Workload, dump_workload
from workloads.trace import (
    DEFAULT_ITERATION_SCALE,
    DEFAULT_LOAD,
    DEFAULT_TRACE,
    ReplayOptions,
    replay_trace,
)

Number = TypeVar("Number", int, float)

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
    seed: Annotated[int, typer.Option(help="same seed and options, same workload")] = 0,
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
