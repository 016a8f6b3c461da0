"""The simulated daemon's TPM, fitted from simulated profiling runs (paper Sec. III-B).

Before planning, A-Dloader profiles: training steps of many models with the input stall
removed, and one job's loading rate alone on the node for 1 .. many workers (Fig. 5). Here
those runs are drawn from the node's truth with its noise, written as the same sample
columns `stoker tpm fit` reads, and fitted by the same `tpm.fit`. The scheduler then plans
with that fit, never with the truth.
"""

import random
from dataclasses import dataclass

import numpy as np

from scheduler.messages import device_pipeline
from tpm import FittedTPM, LoadingSamples, TrainingSamples, fit
from tpm.zoo import model_features
from workloads.truth import NodeTruth

# Models profiled: the zoo families at several depths and widths, like the paper's synthetic
# set. Profiling covers the zoo, not the workload, so a new job's model may be unseen.
PROFILED_MODELS = tuple(
    f"{width}{family}{depth}"
    for width in ("", "md", "sm")
    for family, depths in (("Resnet", (10, 14, 18, 24, 34, 50)), ("VGG", (7, 11, 13, 16)))
    for depth in depths
)
PROFILED_BATCHES = (16, 32, 64, 128)  # per GPU
LOADING_BATCHES = (32, 64, 128)
MEASUREMENT_NOISE = 0.02  # timing noise of one profiling measurement


@dataclass(frozen=True)
class Profile:
    """What profiling measured and the model fitted from it."""

    training: TrainingSamples
    loading: LoadingSamples
    model: FittedTPM
    report: dict[str, object]


_fits: dict[str, Profile] = {}


def profile_node(truth: NodeTruth, gpus: int, cpu_workers: int, seed: int) -> Profile:
    """Profile the node and fit its TPM; the same arguments give the same fit (cached)."""
    key = repr((truth, gpus, cpu_workers, seed))
    if key not in _fits:
        rng = random.Random(seed)
        training = _training_samples(truth, gpus, rng)
        loading = _loading_samples(truth, cpu_workers, rng)
        result = fit(training, loading, seed=seed)
        _fits[key] = Profile(training, loading, result.model, result.report)
    return _fits[key]


def _noise(rng: random.Random, spread: float) -> float:
    return float(np.exp(rng.gauss(0.0, spread)))


def _training_samples(truth: NodeTruth, gpus: int, rng: random.Random) -> TrainingSamples:
    rows: list[tuple[float, float, float, float, float]] = []
    gpu_counts = [n for n in (1, 2, 4, 8) if n <= gpus]
    for name in PROFILED_MODELS:
        features = model_features(name)
        deviation = _noise(rng, truth.step_noise)  # this model's own unexplained speed
        for batch in PROFILED_BATCHES:
            for n in gpu_counts:
                step = truth.step_time_s(
                    batch_size_per_gpu=batch,
                    flops=features.flops,
                    model_params=features.model_params,
                    gpus=n,
                )
                measured = step * deviation * _noise(rng, MEASUREMENT_NOISE)
                rows.append((batch, features.flops, features.model_params, n, measured))
    columns = np.array(rows).T
    return TrainingSamples(
        source="simulated profiling (training)",
        batch_size=columns[0],
        flops=columns[1],
        model_params=columns[2],
        gpus=columns[3],
        step_time_s=columns[4],
    )


def _loading_samples(truth: NodeTruth, cpu_workers: int, rng: random.Random) -> LoadingSamples:
    """One job alone, 1 .. 2C workers (past C so that saturation shows), per pipeline; with
    a decoder, each pipeline's device variant too (workers that only augment)."""
    pipelines: list[str] = []
    rows: list[tuple[float, float, float]] = []
    costs = {pipeline: truth.cost(pipeline) for pipeline in truth.sample_cost_s}
    if truth.decoder_cores > 0:
        costs |= {device_pipeline(p): truth.device_cost(p) for p in truth.sample_cost_s}
    for pipeline, cost in sorted(costs.items()):
        for batch in LOADING_BATCHES:
            for workers in range(1, 2 * cpu_workers + 1):
                rate = truth.capacity(workers) / (cost * batch)
                pipelines.append(pipeline)
                rows.append((batch, workers, rate * _noise(rng, MEASUREMENT_NOISE)))
    columns = np.array(rows).T
    return LoadingSamples(
        source="simulated profiling (loading)",
        pipeline=tuple(pipelines),
        batch_size=columns[0],
        workers=columns[1],
        load_rate=columns[2],
    )
