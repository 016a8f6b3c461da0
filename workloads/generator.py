"""Synthetic workloads: the paper's workload generator (A-Dloader Sec. IV-A), seeded.

Each job draws, independently and uniformly from its option's choices:
- a model from `models` (zoo names; list a name twice to draw it twice as often). The
  default mix is the paper's ResNet and VGG family: its standard depths, its synthetic
  depths and its 2x (md) and 4x (sm) narrower variants;
- a per-GPU batch from `batch_sizes`; the job's global batch is that times its GPUs, so
  the work (and memory) per GPU is what the choice says whatever the GPU count;
- a GPU count from `gpu_counts`; the default (1, 2, 4) keeps only the counts that fit the
  node, while counts the user names must all fit;
- an iteration count from `min_iterations` to `max_iterations`, both included.

Arrivals are either given (`arrivals_s`, one per job, never decreasing) or a Poisson
process: the first job arrives at 0 s and the gaps are exponential with mean
`mean_interarrival_s`, rounded to the millisecond. The default mean, 240 s, offers a 4-GPU,
18-worker node about 0.7 of its GPU time with the default mix and iterations (GPU work alone
by `NodeTruth.step_time_s`; about 0.8 counting steps slowed by loading at 4.5 workers a GPU).

The same options and seed give the same workload (Python's `random.Random`, whose seeded
streams are stable across versions for the calls used here). Jobs get no `gpu_indices`: the
simulator admits them to the least loaded GPUs, one job per GPU.
"""

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tpm.errors import UnknownModel
from tpm.zoo import model_features
from workloads.errors import WorkloadError
from workloads.spec import Workload, check_node_options, parse_workload

DEFAULT_MODELS = (
    "Resnet18",
    "Resnet28",
    "Resnet34",
    "VGG7",
    "VGG13",
    "VGG16",
    "mdResnet12",
    "smResnet20",
    "mdVGG13",
    "smVGG7",
)
DEFAULT_BATCH_SIZES = (32, 64, 128)  # per GPU
DEFAULT_GPU_COUNTS = (1, 2, 4)
DEFAULT_MEAN_INTERARRIVAL_S = 240.0
DEFAULT_ITERATIONS = (500, 1500)  # the range of the paper's Table III


@dataclass(frozen=True)
class GeneratorOptions:
    """What to generate. Field names match the CLI's options (`--mean-interarrival-s`)."""

    jobs: int
    seed: int = 0
    mean_interarrival_s: float | None = None  # None with no arrivals_s: the default mean
    arrivals_s: tuple[float, ...] | None = None
    models: tuple[str, ...] = DEFAULT_MODELS
    batch_sizes: tuple[int, ...] = DEFAULT_BATCH_SIZES
    gpu_counts: tuple[int, ...] | None = None  # None: DEFAULT_GPU_COUNTS that fit the node
    min_iterations: int = DEFAULT_ITERATIONS[0]
    max_iterations: int = DEFAULT_ITERATIONS[1]
    gpus: int = 4  # the node's
    cpu_workers: int = 18  # the node's loader processes (C)
    name: str | None = None  # None: generated-seed<seed>


def generate_workload(options: GeneratorOptions) -> Workload:
    """A synthetic workload; WorkloadError names the CLI option to change."""
    gpu_counts = _check(options)
    rng = random.Random(options.seed)
    arrivals = _arrivals(options, rng)
    width = max(3, len(str(options.jobs)))
    jobs: list[dict[str, Any]] = []
    for index, arrival_s in enumerate(arrivals):
        model = rng.choice(options.models)
        gpus = rng.choice(gpu_counts)
        per_gpu_batch = rng.choice(options.batch_sizes)
        jobs.append(
            {
                "id": f"job{index:0{width}d}",
                "model": model,
                "batch_size": per_gpu_batch * gpus,
                "gpus": gpus,
                "iterations": rng.randint(options.min_iterations, options.max_iterations),
                "arrival_s": arrival_s,
            }
        )
    data = {
        "name": options.name or f"generated-seed{options.seed}",
        "description": _description(options, gpu_counts),
        "node": {"gpus": options.gpus, "cpu_workers": options.cpu_workers, "max_jobs_per_gpu": 1},
        "jobs": jobs,
    }
    return parse_workload(data, "generated workload")


def _arrivals(options: GeneratorOptions, rng: random.Random) -> list[float]:
    if options.arrivals_s is not None:
        return [float(arrival) for arrival in options.arrivals_s]
    mean = _mean_interarrival(options)
    arrivals, now = [], 0.0
    for index in range(options.jobs):
        if index:
            now += rng.expovariate(1.0 / mean)
        arrivals.append(round(now, 3))
    return arrivals


def _mean_interarrival(options: GeneratorOptions) -> float:
    if options.mean_interarrival_s is None:
        return DEFAULT_MEAN_INTERARRIVAL_S
    return options.mean_interarrival_s


def _check(options: GeneratorOptions) -> tuple[int, ...]:
    """Refuse impossible options; return the GPU counts to draw from."""
    if options.jobs < 1:
        raise WorkloadError("--jobs", f"must be at least 1, got {options.jobs}")
    check_node_options(options.gpus, options.cpu_workers)
    _check_arrivals(options)
    if not options.models:
        raise WorkloadError("--models", "name at least one zoo model, e.g. Resnet18,smVGG7")
    for model in options.models:
        try:
            model_features(model)
        except UnknownModel as error:
            named = error.message if repr(model) in error.message else f"{model}: {error.message}"
            raise WorkloadError("--models", named) from None
    _positive_choices("--batch-sizes", options.batch_sizes)
    if options.gpu_counts is None:
        gpu_counts = tuple(count for count in DEFAULT_GPU_COUNTS if count <= options.gpus)
    else:
        gpu_counts = options.gpu_counts
        _positive_choices("--gpu-counts", gpu_counts)
        too_many = sorted({count for count in gpu_counts if count > options.gpus})
        if too_many:
            raise WorkloadError(
                "--gpu-counts",
                f"{', '.join(map(str, too_many))} GPUs do not fit a node of {options.gpus}; "
                f"use counts up to {options.gpus} or raise --gpus",
            )
    if not 1 <= options.min_iterations <= options.max_iterations:
        raise WorkloadError(
            "--min-iterations",
            f"need 1 <= --min-iterations <= --max-iterations, got "
            f"{options.min_iterations} and {options.max_iterations}",
        )
    return gpu_counts


def _check_arrivals(options: GeneratorOptions) -> None:
    if options.arrivals_s is not None:
        if options.mean_interarrival_s is not None:
            raise WorkloadError(
                "--arrivals", "give either --arrivals or --mean-interarrival-s, not both"
            )
        if len(options.arrivals_s) != options.jobs:
            raise WorkloadError(
                "--arrivals",
                f"has {len(options.arrivals_s)} times for {options.jobs} jobs; "
                "give one time per job (or leave out --jobs)",
            )
        previous = 0.0
        for position, arrival in enumerate(options.arrivals_s, start=1):
            if not math.isfinite(arrival) or arrival < 0:
                raise WorkloadError("--arrivals", f"time {position} is {arrival}; use seconds >= 0")
            if arrival < previous:
                raise WorkloadError(
                    "--arrivals",
                    f"time {position} ({arrival:g}) comes before time {position - 1} "
                    f"({previous:g}); list the times in order",
                )
            previous = arrival
        return
    mean = _mean_interarrival(options)
    if not (math.isfinite(mean) and mean > 0):
        raise WorkloadError("--mean-interarrival-s", f"must be a positive number, got {mean}")


def _positive_choices(option: str, choices: Sequence[int]) -> None:
    if not choices:
        raise WorkloadError(option, "give at least one value")
    bad = [choice for choice in choices if choice < 1]
    if bad:
        raise WorkloadError(option, f"values must be at least 1, got {bad[0]}")


def _description(options: GeneratorOptions, gpu_counts: Sequence[int]) -> str:
    if options.arrivals_s is not None:
        arrivals = "given arrival times"
    else:
        arrivals = (
            f"Poisson arrivals, mean inter-arrival {_mean_interarrival(options):g} s, first at 0 s"
        )
    return (
        f"stoker workload generate: {options.jobs} jobs, seed {options.seed}, {arrivals}; "
        f"models drawn uniformly from {', '.join(options.models)}; "
        f"per-GPU batch from {', '.join(map(str, options.batch_sizes))} "
        f"(global batch = per-GPU batch x gpus); "
        f"gpus from {', '.join(map(str, gpu_counts))}; "
        f"iterations {options.min_iterations} to {options.max_iterations}"
    )
