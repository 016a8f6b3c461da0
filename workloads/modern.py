"""A node of today for the simulator: 8 A100-class GPUs, 128 cores, and jobs whose curves
are published measurements (issue 16, item 6; docs/simulator.md cites each source).

Per-job curves: Synergy's (Mohan et al., OSDI 2022) profiles of single-job throughput at 1,
2, 3, 4, 5, 6, 9, 12 and 24 CPU cores per V100 GPU, relative to 3 cores, as the authors
released them with their simulator (github.com/msr-fiddle/synergy at 1b013c23,
`simulator/models/<model>_<gpus>.py`: `tput`, with `batch` and `iter_time` giving the rate
at 3 cores). The same numbers agree with the paper's own text and its predecessor
(DS-Analyzer, Mohan et al., VLDB 2021: ResNet-50 needs "3 - 4 CPU cores per GPU", ResNet-18
and AlexNet "12 - 24").

On an A100: no per-model curve of cores against throughput was found published for A100 or
H100 GPUs. An A100 trains ResNet-50 2,470 / 1,200 = 2.06 times as fast as a V100 (NVIDIA
DeepLearningExamples, ResNet-50 v1.5 PyTorch, mixed precision, one GPU) while a CPU core
prepares the same samples per second, so each V100 curve is stretched by that factor on
both axes: the rate w cores give an A100 job is 2.06 x the V100 rate at w / 2.06 cores.
That stretch is our assumption, stated wherever its results are.

The node: a DGX A100 has 2 x 64 cores for 8 GPUs (MLPerf Training v2.0, NVIDIA's system
description `dgxa100_ngc22.04_mxnet.json`); one core per GPU runs the training process,
which leaves 120 loader processes. No published figure of node-wide contention between
loaders on such a node was found: the node has none here (eta = 1), and each job's own
curve carries its saturation.
"""

import random
from dataclasses import dataclass

from workloads.spec import JobCurve, NodeConfig, Workload, WorkloadJob

SYNERGY = "Synergy (Mohan et al., OSDI 2022) artifact, msr-fiddle/synergy@1b013c23"
SYNERGY_CORES = (1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 9.0, 12.0, 24.0)  # job.py `cpu_val`
# NVIDIA DeepLearningExamples, PyTorch ResNet-50 v1.5 README, training, AMP, 1 GPU:
# DGX A100 2,470 img/s, DGX-1 V100 1,200 img/s.
A100_OVER_V100 = 2470.0 / 1200.0
GPUS = 8
CORES = 128  # DGX A100: 2 x AMD EPYC 7742, 64 cores each
LOADER_PROCESSES = CORES - GPUS  # one core per GPU runs its training process


@dataclass(frozen=True)
class Published:
    """One model's Synergy profile: throughput at SYNERGY_CORES per GPU, relative to 3."""

    model: str
    file: str  # in the artifact
    relative: tuple[float, ...]
    batch_size: int  # the profile's batch (all its GPUs)
    iter_time_s: float  # at 3 cores per GPU
    gpus: int  # GPUs the profile was measured on
    flops: float  # forward multiply-accumulates per sample: the prior's feature only
    model_params: float

    def v100_samples_per_s(self) -> tuple[float, ...]:
        """Per GPU, at each of SYNERGY_CORES."""
        at_three = self.batch_size / self.iter_time_s / self.gpus
        return tuple(r * at_three for r in self.relative)

    def a100_curve(self) -> JobCurve:
        """The V100 curve stretched to an A100 (module docstring)."""
        k = A100_OVER_V100
        return JobCurve(
            workers_per_gpu=tuple(k * c for c in SYNERGY_CORES),
            samples_per_s=tuple(k * r for r in self.v100_samples_per_s()),
            source=f"{SYNERGY}, {self.file}; stretched x{k:.2f} to an A100",
        )


# Vision models: the 62.5 GB column, except AlexNet and ShuffleNet whose profiles rise
# further with the memory Synergy gives them (the 125 GB column, their `mem`). FLOPs and
# parameters are close to torchvision's published figures (224 px); M5's and the sequence
# models' are rough. Only the prior the scheduler starts from uses them.
PUBLISHED = {
    "resnet18": Published(
        "Resnet18", "res18_1.py", (0.37, 0.72, 1, 1.3, 1.53, 1.75, 2.4, 2.4, 2.4),
        512, 0.64, 1, 1.82e9, 11.7e6,
    ),
    "resnet50": Published(
        "Resnet50", "res50_1.py", (0.40, 0.74, 1, 1.15, 1.15, 1.15, 1.15, 1.15, 1.15),
        512, 0.78, 1, 4.1e9, 25.6e6,
    ),
    "alexnet": Published(
        "alexnet", "alexnet_1.py", (0.3, 0.66, 1, 1.25, 1.53, 1.75, 2.0, 2.94, 2.94),
        512, 0.6, 1, 0.71e9, 61.1e6,
    ),
    "shufflenet": Published(
        "shufflenet_v2", "shufflenet_1.py", (0.3, 0.66, 1, 1.25, 1.53, 1.75, 2.0, 2.89, 2.89),
        512, 0.615, 1, 0.15e9, 2.3e6,
    ),
    "mobilenet": Published(
        "mobilenet_v2", "mobilenet_1.py", (0.37, 0.72, 1, 1.3, 1.49, 1.55, 1.55, 1.55, 1.55),
        512, 0.71, 1, 0.3e9, 3.5e6,
    ),
    "m5": Published(
        "m5_audio", "m5_1.py", (0.3, 0.66, 1, 1.2, 1.4, 1.5, 1.5, 1.5, 1.5),
        512, 0.6, 1, 0.05e9, 0.5e6,
    ),
    "deepspeech": Published(
        "deepspeech2", "deepspeech_2.py", (0.3, 0.66, 1, 1, 1, 1, 1, 1, 1),
        20, 0.757, 2, 30e9, 38e6,
    ),
    "transformer": Published(
        "transformer", "transformer_2.py", (1, 1, 1, 1, 1, 1, 1, 1, 1),
        128, 0.67, 2, 5e9, 65e6,
    ),
}  # fmt: skip

# What the simulated node is like beyond the jobs' own curves: the prior's GPU speed is an
# A100's on ResNet-50 (2,470 img/s at batch 256: 3 x 280 x 4.1e9 MACs in about 0.09 s), a
# core prepares about 300 ImageNet images a second (DLBooster, Cheng et al., TPDS 2021,
# Sec. 2.2), and the node has no loader contention (module docstring).
#
# Its jobs resize in place, as the SDK does by default (DESIGN.md, application master). A
# pause ends the step under way (0.2 s for ResNet-50 at batch 512 on an A100) and writes
# the checkpoint (its weights and momentum, 205 MB, to local NVMe at about 2 GB/s: 0.1 s);
# the resume forks the new loader workers and waits for the first batch, which one worker
# makes alone (the simulator adds it: 512 images at one worker's 263 a second on ResNet-50's
# curve, 1.95 s; 1.7 to 2.1 s for the vision models). The 0.3 and
# 0.5 s are our assumptions, scaled from the SDK's resize measured on CPUs (docs/results.md,
# "Hot resize of the image example": 14 to 21 ms to pause, 45 to 48 ms to fork two workers
# and get their first small batch); no GPU node was lent to measure them. `COLD` is the
# paper's restart from the checkpoint instead (about 16 s a round).
TRUTH: dict[str, object] = {
    "gpu_macs_per_s": 3.8e13,
    "step_overhead_s": 0.005,
    "allreduce_bytes_per_s": 1.0e11,  # NVLink 3: 600 GB/s a GPU, far from the bottleneck
    "sample_cost_s": {"imagenet": 1.0 / 300.0},
    "contention_free_workers": float(LOADER_PROCESSES),
    "saturated_capacity": float(LOADER_PROCESSES),
    "hot_resize": True,
    "pause_s": 0.3,
    "resume_s": 0.5,
}
COLD: dict[str, object] = {"hot_resize": False, "pause_s": 9.0, "resume_s": 7.0}

# The mixes of item 6: one job per GPU, all at once, each job 10 minutes at its peak.
MIXES: dict[str, tuple[str, ...]] = {
    # Loader-hungry vision beside jobs that need a core or two: where the split matters.
    "vision+sequence": (
        *("alexnet", "shufflenet", "resnet18", "alexnet"),
        *("transformer", "deepspeech", "transformer", "resnet50"),
    ),
    "all vision": (
        *("resnet18", "alexnet", "shufflenet", "mobilenet"),
        *("resnet50", "resnet18", "alexnet", "m5"),
    ),
    # Every job saturates at few cores: no split can do much better than an even one.
    "compute-bound": (
        *("resnet50", "transformer", "deepspeech", "mobilenet"),
        *("resnet50", "transformer", "deepspeech", "m5"),
    ),
}
PEAK_SECONDS = 600.0


def modern_job(
    job_id: str, name: str, *, seconds_at_peak: float, arrival_s: float = 0.0
) -> WorkloadJob:
    """One single-GPU job of `PUBLISHED[name]` that trains `seconds_at_peak` at its peak."""
    published = PUBLISHED[name]
    curve = published.a100_curve()
    batch = published.batch_size // published.gpus
    iterations = max(1, round(seconds_at_peak * max(curve.samples_per_s) / batch))
    return WorkloadJob(
        id=job_id,
        model=published.model,
        flops=published.flops,
        model_params=published.model_params,
        batch_size=batch,
        gpus=1,
        iterations=iterations,
        arrival_s=arrival_s,
        workers_per_gpu=LOADER_PROCESSES // GPUS,  # `static`: the node's cores, evenly
        curve=curve,
    )


def _node() -> NodeConfig:
    return NodeConfig(gpus=GPUS, cpu_workers=LOADER_PROCESSES, max_jobs_per_gpu=1)


def mix_workload(mix: str) -> Workload:
    """Eight jobs of `MIXES[mix]`, one per GPU, all arriving at once."""
    jobs = tuple(
        modern_job(f"{name}-{index}", name, seconds_at_peak=PEAK_SECONDS)
        for index, name in enumerate(MIXES[mix])
    )
    return Workload(
        name=f"modern {mix}",
        description="8 A100s, 120 loader processes, Synergy's curves stretched to an A100",
        node=_node(),
        truth=dict(TRUTH),
        jobs=jobs,
    )


def arrivals_workload(seed: int, jobs: int = 24, mean_gap_s: float = 120.0) -> Workload:
    """`jobs` single-GPU jobs of the published models, arriving as a Poisson process, each 5
    to 20 minutes at its peak: a node that fills, drains and refills."""
    rng = random.Random(seed)
    names = sorted(PUBLISHED)
    clock = 0.0
    chosen: list[WorkloadJob] = []
    for index in range(jobs):
        name = rng.choice(names)
        chosen.append(
            modern_job(
                f"{name}-{index}",
                name,
                seconds_at_peak=rng.uniform(300.0, 1200.0),
                arrival_s=round(clock, 1),
            )
        )
        clock += rng.expovariate(1.0 / mean_gap_s)
    return Workload(
        name=f"modern arrivals seed {seed}",
        description="Poisson arrivals of the published models on 8 A100s",
        node=_node(),
        truth=dict(TRUTH),
        jobs=tuple(chosen),
    )
