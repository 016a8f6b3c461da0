"""The simulated node's ground truth: how fast jobs really train and load. NOT the TPM.

The TPM (formulas 6 and 7) is a model fitted from measurements; this is the world those
measurements come from, and it deliberately differs from the model's form:

- Step time: forward and backward cost 3 x b x f multiply-accumulates at a GPU speed that
  only reaches its peak for large batches ((b + half_batch) x f instead of b x f), plus a
  fixed per-step cost, a weight update per parameter, and for n > 1 GPUs a ring all-reduce
  (latency plus 2 (n-1)/n x 4 M bytes at a bus speed). Each job also runs `step_noise`
  (lognormal) faster or slower than the formula, for reasons no feature explains.
- Loading: one worker of pipeline p costs c_p seconds per sample alone; the node's D
  workers together deliver capacity(D) = D x eta(D) worker-equivalents, with eta = 1 up to
  `contention_free_workers` and then a smooth exponential approach to `saturated_capacity`:
  no kink where the TPM's segmented fit puts its breakpoints.
- A job's iteration rate is a soft minimum of its loading rate and its GPU rate (prefetch
  queues do not hide jitter completely near the balance point), and jobs that share a GPU
  share its time: each gets what it asks for if the GPU can give it, otherwise a max-min
  fair share, and time-sharing costs `share_overhead` extra. A job spread over several GPUs
  runs at the pace of its slowest one.
- A decoder device (DLBooster's FPGA), when `decoder_cores` > 0: it decodes as fast as
  that many CPU workers would, K = decoder_cores / (decode_fraction x c) samples/s, shared
  by the jobs in device mode in proportion to their shares, work-conserving (weighted
  max-min: a share a job cannot use goes to the others). A device-mode job's workers only
  augment, at (1 - decode_fraction) x c a sample.
- Pausing (finish the iteration, checkpoint), resuming (restart workers) and launching cost
  seconds drawn around their means; measured rates carry `rate_noise`. A node whose jobs
  resize in place (`hot_resize`) also waits, after its workers start, for the first batch:
  one worker makes a whole batch, batch x c / eta(D) seconds.
- A job may bring its own measured curve instead (`MeasuredCurve`: a published profile of
  its samples/s per GPU at 1, 2, ... loader workers per GPU, measured alone). Its rate is
  then that curve at its workers times eta, linear between the points and flat past the
  last; its step time is its batch over the curve's peak. No formula, no noise.
"""

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from scheduler.messages import DEFAULT_PIPELINE
from workloads.errors import WorkloadError

_BYTES_PER_PARAM = 4
_SOFT_MIN_POWER = 8.0  # the larger, the closer to a hard min(loading, GPU)
_SHARING_PASSES = 4  # fixed-point passes of the GPU time split (converges in 2-3)


@dataclass(frozen=True)
class NodeTruth:
    """Everything the simulator knows and the scheduler must learn or be told.

    The defaults are the paper's testbed (4 GPUs, 18 loader processes), calibrated on the
    three baselines of Fig. 3 only (`python -m bench.calibrate_paper`, docs/simulator.md):
    GPU speed, sample cost and the contention curve were searched on a grid; the rest are
    round figures for an RTX 2080 Ti server.
    """

    gpu_macs_per_s: float = 4.5e12  # sustained multiply-accumulates per second at large batch
    half_batch: float = 24.0  # per-GPU batch at which the GPU reaches half its speed
    step_overhead_s: float = 0.012  # kernel launches and Python per step
    update_s_per_param: float = 2.0e-10  # optimizer step per parameter
    allreduce_bytes_per_s: float = 6.0e9
    allreduce_latency_s: float = 0.002
    share_overhead: float = 0.10  # extra GPU time when several jobs time-share a GPU
    sample_cost_s: Mapping[str, float] = field(default_factory=lambda: {"imagenet": 0.0085})
    contention_free_workers: float = 9.0
    saturated_capacity: float = 18.0  # worker-equivalents the node can ever deliver
    step_noise: float = 0.05
    rate_noise: float = 0.03
    pause_s: float = 9.0  # finish the iteration and write the checkpoint
    resume_s: float = 7.0  # restart the loader workers (paper: about 16 s per round)
    # The jobs resize in place (the SDK's hot resize): the process and the model stay, the
    # loader is rebuilt with its new workers, and the job waits `resume_s` for them to start
    # and then for its first batch, one worker's batch of work (scheduler requests say so).
    # Off: every resize restarts the job from its checkpoint, as the paper's prototype did.
    hot_resize: bool = False
    launch_s: float = 10.0
    cost_jitter: float = 0.15  # relative spread of pause, resume and launch costs
    # The decoder device, in CPU workers' worth of decoding (DLBooster Sec. 7: about 20 per
    # FPGA); 0: no decoder. `decode_fraction` of a sample's CPU cost is the JPEG decode,
    # the rest (crop, flip, normalise) stays on the CPU in device mode.
    decoder_cores: float = 0.0
    decode_fraction: float = 0.6

    def __post_init__(self) -> None:
        positive = (
            "gpu_macs_per_s",
            "allreduce_bytes_per_s",
            "saturated_capacity",
            "contention_free_workers",
        )
        for name in positive:
            if not getattr(self, name) > 0:
                raise WorkloadError(f"truth.{name}", "must be a positive number")
        if self.saturated_capacity < self.contention_free_workers:
            raise WorkloadError(
                "truth.saturated_capacity", "must be at least contention_free_workers"
            )
        if self.decoder_cores < 0:
            raise WorkloadError("truth.decoder_cores", "must be 0 (no decoder) or more")
        if not 0.0 < self.decode_fraction < 1.0:
            raise WorkloadError("truth.decode_fraction", "must be between 0 and 1")
        for pipeline, cost in self.sample_cost_s.items():
            if not cost > 0:
                raise WorkloadError(f"truth.sample_cost_s.{pipeline}", "must be positive")

    # ---- the GPU -------------------------------------------------------------------------

    def step_time_s(
        self, *, batch_size_per_gpu: float, flops: float, model_params: float, gpus: int
    ) -> float:
        """Seconds per iteration on an unshared GPU with loading removed (before noise)."""
        compute = 3.0 * (batch_size_per_gpu + self.half_batch) * flops / self.gpu_macs_per_s
        update = model_params * self.update_s_per_param
        allreduce = 0.0
        if gpus > 1:
            volume = 2.0 * (gpus - 1) / gpus * _BYTES_PER_PARAM * model_params
            allreduce = self.allreduce_latency_s + volume / self.allreduce_bytes_per_s
        return self.step_overhead_s + compute + update + allreduce

    # ---- loading -------------------------------------------------------------------------

    def cost(self, pipeline: str) -> float:
        """c_p: one worker's seconds per sample alone."""
        try:
            return self.sample_cost_s[pipeline]
        except KeyError:
            known = ", ".join(sorted(self.sample_cost_s))
            raise WorkloadError(
                "jobs[].pipeline", f"unknown pipeline {pipeline!r}; the node knows {known}"
            ) from None

    def device_cost(self, pipeline: str) -> float:
        """c': one worker's seconds per sample when the decoder decodes (augment only)."""
        return (1.0 - self.decode_fraction) * self.cost(pipeline)

    def decoder_capacity(self, pipeline: str) -> float:
        """K in samples/s of `pipeline`: `decoder_cores` workers' worth of its decoding."""
        return self.decoder_cores / (self.decode_fraction * self.cost(pipeline))

    def capacity(self, workers: float) -> float:
        """D x eta(D): what D busy workers deliver, in contention-free worker equivalents."""
        free = self.contention_free_workers
        if workers <= free:
            return workers
        # Slope 1 at the knee, falling smoothly to 0: no kink anywhere, and eta <= 1.
        headroom = self.saturated_capacity - free
        if headroom <= 0:
            return free
        return free + headroom * (1.0 - math.exp(-(workers - free) / headroom))

    def efficiency(self, workers: float) -> float:
        """eta(D)."""
        return 1.0 if workers <= 0 else self.capacity(workers) / workers

    def contention_points(self, most: int) -> tuple[tuple[float, float], ...]:
        """eta at every integer D from 1 to `most`: the exact curve as allocator points."""
        return tuple((float(d), self.efficiency(d)) for d in range(1, max(most, 2) + 1))

    # ---- costs of control ----------------------------------------------------------------

    def draw(self, mean: float, rng: random.Random) -> float:
        """A pause, resume or launch cost around its mean."""
        return max(0.0, rng.gauss(mean, self.cost_jitter * mean))


@dataclass(frozen=True)
class MeasuredCurve:
    """A job's samples/s per GPU against its loader workers per GPU, measured alone on its
    GPU (`workloads.spec.JobCurve` checks the points): linear between the points, through
    (0, 0), flat past the last."""

    workers_per_gpu: tuple[float, ...]  # increasing
    samples_per_s: tuple[float, ...]  # per GPU, never falling

    def rate(self, workers_per_gpu: float) -> float:
        """Samples/s per GPU at this many (effective) workers per GPU."""
        return float(
            np.interp(workers_per_gpu, (0.0, *self.workers_per_gpu), (0.0, *self.samples_per_s))
        )

    @property
    def peak(self) -> float:
        """Samples/s per GPU once loading keeps up."""
        return max(self.samples_per_s)

    @property
    def cheapest_cost_s(self) -> float:
        """The fewest worker-seconds a sample ever takes on this curve (its best point)."""
        return min(w / s for w, s in zip(self.workers_per_gpu, self.samples_per_s, strict=True))


@dataclass(frozen=True)
class RunningJob:
    """What the truth needs of a job that is running: its own rates and its GPUs."""

    job_id: str
    gpu_indices: tuple[int, ...]
    step_time_s: float  # alone on its GPUs, noise included
    batch_size_per_gpu: float
    workers_per_gpu: int
    sample_cost_s: float  # per worker: c, or c' in device mode
    decoder_share: float = 0.0  # > 0: device mode
    curve: MeasuredCurve | None = None  # its own measured curve: loading and GPU at once


def iteration_rates(
    truth: NodeTruth, jobs: Sequence[RunningJob], loader_processes: int
) -> dict[str, float]:
    """True iterations per second of every running job, given all of them at once."""
    efficiency = truth.efficiency(loader_processes)
    loading = {
        job.job_id: job.workers_per_gpu * efficiency / (job.sample_cost_s * job.batch_size_per_gpu)
        for job in jobs
    }
    sharing: dict[int, list[RunningJob]] = {}
    for job in jobs:
        for gpu in job.gpu_indices:
            sharing.setdefault(gpu, []).append(job)
    shared = {gpu: held for gpu, held in sharing.items() if len(held) > 1}
    sharers = {job.job_id for held in shared.values() for job in held}
    # GPU seconds per iteration: time-sharing a GPU makes every step on it dearer.
    cost = {
        job.job_id: job.step_time_s * (1.0 + truth.share_overhead * (job.job_id in sharers))
        for job in jobs
    }
    _share_decoder(truth, jobs, loading, cost)
    rates = {
        job.job_id: (
            job.curve.rate(job.workers_per_gpu * efficiency) / job.batch_size_per_gpu
            if job.curve is not None
            else _soft_min(loading[job.job_id], 1.0 / cost[job.job_id])
        )
        for job in jobs
    }
    for _ in range(_SHARING_PASSES if shared else 0):
        limits: dict[str, float] = {}
        for held in shared.values():
            asked = {job.job_id: rates[job.job_id] * cost[job.job_id] for job in held}
            for job_id, fraction in _max_min_fair(asked).items():
                limit = fraction / cost[job_id]
                limits[job_id] = min(limits.get(job_id, math.inf), limit)
        rates = {
            job.job_id: min(rates[job.job_id], limits.get(job.job_id, math.inf)) for job in jobs
        }
    return rates


def _share_decoder(
    truth: NodeTruth,
    jobs: Sequence[RunningJob],
    loading: dict[str, float],
    cost: Mapping[str, float],
) -> None:
    """Cap device-mode jobs' loading rates at what the decoder serves them: weighted
    max-min fair by share, each asking what its workers and GPUs could take."""
    on_device = [job for job in jobs if job.decoder_share > 0.0]
    if not on_device:
        return
    capacity = truth.decoder_capacity(DEFAULT_PIPELINE) if truth.decoder_cores > 0 else 0.0
    asked = {
        job.job_id: min(loading[job.job_id], 1.0 / cost[job.job_id])
        * job.batch_size_per_gpu
        * len(job.gpu_indices)
        for job in on_device
    }
    weights = {job.job_id: job.decoder_share for job in on_device}
    for job_id, served in _weighted_max_min(capacity, asked, weights).items():
        job = next(j for j in on_device if j.job_id == job_id)
        cap = served / (job.batch_size_per_gpu * len(job.gpu_indices))
        loading[job_id] = min(loading[job_id], cap)


def _weighted_max_min(
    capacity: float, asked: Mapping[str, float], weights: Mapping[str, float]
) -> dict[str, float]:
    """Split `capacity` in proportion to `weights`; what a job does not need goes to the rest."""
    granted: dict[str, float] = {}
    waiting = dict(asked)
    left = capacity
    while waiting:
        total_weight = sum(weights[job_id] for job_id in waiting)
        satisfied = {
            job_id: need
            for job_id, need in waiting.items()
            if need <= left * weights[job_id] / total_weight
        }
        if not satisfied:
            for job_id in waiting:
                granted[job_id] = left * weights[job_id] / total_weight
            break
        for job_id, need in satisfied.items():
            granted[job_id] = need
            left -= need
            del waiting[job_id]
    return granted


def _soft_min(loading: float, gpu: float) -> float:
    return float((loading**-_SOFT_MIN_POWER + gpu**-_SOFT_MIN_POWER) ** (-1.0 / _SOFT_MIN_POWER))


def _max_min_fair(asked: Mapping[str, float]) -> dict[str, float]:
    """Split one unit of GPU time: small asks are met in full, the rest share equally."""
    left, granted = 1.0, {}
    waiting = sorted(asked, key=lambda job_id: asked[job_id])
    while waiting:
        level = left / len(waiting)
        job_id = waiting[0]
        if asked[job_id] <= level:
            granted[job_id] = asked[job_id]
            left -= asked[job_id]
            waiting.pop(0)
        else:
            for rest in waiting:
                granted[rest] = level
            break
    return granted
