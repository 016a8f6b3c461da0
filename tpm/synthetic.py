"""Sample files drawn from a known truth: for accuracy tests, the fit benchmark, and trying
the model without profiling a node.

Training samples follow formula 6 with chosen alphas; loading samples follow formula 7
with a chosen piecewise-linear capacity K(D). Both get multiplicative noise (a lognormal
factor of the given spread) and a seeded generator, so a test can compare what the fit
learned with what produced the data.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tpm import LoadingSamples, TrainingSamples, read_loading_samples, read_training_samples
from tpm.arrays import FloatArray

# Mini-batch sizes per GPU and GPU counts a node runs (ResNet/VGG-like jobs).
BATCH_SIZES = (16, 32, 64, 128, 256)
GPU_COUNTS = (1, 2, 4, 8)
FLOPS_RANGE = (0.1e9, 15e9)  # forward FLOPs per sample: small ResNets to VGG16
PARAMS_RANGE = (0.5e6, 140e6)  # parameters: ResNet-20 to VGG16


@dataclass(frozen=True)
class TrainingTruth:
    """Formula 6's alphas that generate step times."""

    alpha0: float = 4e-13  # ResNet-50 at b=64: about 0.1 s of compute per step
    alpha1: float = 3e-10
    alpha2: float = 5e-12
    alpha3: float = 4e-10
    alpha4: float = 5e-3

    def step_time_s(
        self, batch: FloatArray, flops: FloatArray, params: FloatArray, gpus: FloatArray
    ) -> FloatArray:
        """Noise-free 1/mu for each configuration."""
        result: FloatArray = (
            self.alpha0 * batch * flops
            + self.alpha1 * params * gpus
            + self.alpha2 * batch * params
            + self.alpha3 * params
            + self.alpha4
        )
        return result


@dataclass(frozen=True)
class LoadingTruth:
    """A node's capacity curve and per-pipeline sample costs that generate load rates."""

    contention_from: float | None = 11.0
    saturation_from: float | None = 24.0
    contention_slope: float = 0.4
    sample_cost_s: tuple[tuple[str, float], ...] = (
        ("imagenet-randaug", 0.012),
        ("imagenet-crop", 0.006),
        ("cifar-flip", 0.0009),
    )

    def capacity(self, workers: FloatArray) -> FloatArray:
        """K(D) in worker-equivalents."""
        if self.contention_from is None:
            return workers.astype(np.float64)
        end = np.inf if self.saturation_from is None else self.saturation_from
        clipped = np.minimum(workers, end)
        knee = self.contention_from
        result: FloatArray = np.minimum(clipped, knee) + self.contention_slope * np.maximum(
            clipped - knee, 0.0
        )
        return result


def _csv(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buffer.getvalue()


def _log_uniform(rng: np.random.Generator, bounds: tuple[float, float], count: int) -> FloatArray:
    """Values spread evenly in ratio between the bounds (model sizes span decades)."""
    low, high = bounds
    return np.exp(rng.uniform(np.log(low), np.log(high), count))


def training_csv(
    count: int, seed: int, truth: TrainingTruth | None = None, noise: float = 0.05
) -> str:
    """`count` training samples as CSV text, with an extra `job` column to ignore."""
    truth = truth or TrainingTruth()
    rng = np.random.default_rng(seed)
    batch = rng.choice(np.array(BATCH_SIZES, dtype=np.float64), count)
    gpus = rng.choice(np.array(GPU_COUNTS, dtype=np.float64), count)
    flops = _log_uniform(rng, FLOPS_RANGE, count)
    params = _log_uniform(rng, PARAMS_RANGE, count)
    step = truth.step_time_s(batch, flops, params, gpus) * np.exp(noise * rng.normal(size=count))
    rows = [
        (
            f"job{i}",
            int(batch[i]),
            repr(float(flops[i])),
            repr(float(params[i])),
            int(gpus[i]),
            repr(float(step[i])),
        )
        for i in range(count)
    ]
    return _csv(("job", "batch_size", "flops", "model_params", "gpus", "step_time_s"), rows)


def loading_csv(
    count: int,
    seed: int,
    truth: LoadingTruth | None = None,
    noise: float = 0.05,
    max_workers: int = 32,
) -> str:
    """`count` loading samples (D uniform in 1..max_workers) as CSV, pipelines in turn."""
    truth = truth or LoadingTruth()
    rng = np.random.default_rng(seed)
    names = [name for name, _ in truth.sample_cost_s]
    costs = dict(truth.sample_cost_s)
    pipelines = [names[i % len(names)] for i in range(count)]
    batch = rng.choice(np.array([32.0, 64.0, 128.0]), count)
    workers = rng.integers(1, max_workers + 1, count).astype(np.float64)
    cost = np.array([costs[p] for p in pipelines])
    rate = truth.capacity(workers) / (cost * batch) * np.exp(noise * rng.normal(size=count))
    rows = [
        (pipelines[i], int(batch[i]), int(workers[i]), repr(float(rate[i])), "run-a")
        for i in range(count)
    ]
    return _csv(("pipeline", "batch_size", "workers", "load_rate", "note"), rows)


def training_samples(
    count: int, seed: int, truth: TrainingTruth | None = None, noise: float = 0.05
) -> TrainingSamples:
    """`training_csv` parsed."""
    return read_training_samples(training_csv(count, seed, truth, noise), f"train-{seed}.csv")


def loading_samples(
    count: int,
    seed: int,
    truth: LoadingTruth | None = None,
    noise: float = 0.05,
    max_workers: int = 32,
) -> LoadingSamples:
    """`loading_csv` parsed."""
    text = loading_csv(count, seed, truth, noise, max_workers)
    return read_loading_samples(text, f"load-{seed}.csv")
