"""The throughput model the daemon plans with: where it came from, the samples telemetry
adds to the store, and refits taken into use once the core accepts them."""

import logging
import time
from collections.abc import Callable
from typing import Any

from agents.protocol import HeartbeatMessage
from allocator import ContentionCurve, InvalidRequest, NodeSpec, ThroughputModel
from daemon.config import DaemonConfig
from daemon.learning import training_row
from daemon.store import JobRecord, Store
from scheduler.errors import RefitRejected, RefitUntrusted
from scheduler.messages import JobRequest, ModelRefitted
from scheduler.rates import RateModel
from scheduler.refit import FitQuality
from scheduler.telemetry import Beat, TelemetrySampler
from tpm import FitResult, FittedTPM, TpmError

log = logging.getLogger(__name__)

# The service's way into the core for a refit: the event fed as every other is (the store's
# record, the twin's observer), answering the core's refusal, None when it took the model.
RefitFeed = Callable[[ModelRefitted], Exception | None]


class ModelRejected(TpmError):
    """A refit that cannot plan the node's jobs; the old model stays."""


class TpmKeeper:
    def __init__(
        self,
        config: DaemonConfig,
        store: Store,
        model: ThroughputModel,
        cpu_workers: int,
        cpu_cores: float | None = None,
    ) -> None:
        self._config = config
        self._cpu_workers = cpu_workers  # the node's, set or chosen from the host
        # On a node without GPUs, the CPUs its jobs train and load on (allocator/cpunode.py).
        self._cpu_cores = cpu_cores
        self._store = store
        self.source = "given at start"
        self.report: dict[str, Any] = {}
        stored = store.latest_model()
        if stored is not None:  # a refit outlives restarts
            fitted_at, text, self.report = stored
            model = FittedTPM.from_json(text, "the state file's newest model")
            self.source = f"fitted from stored samples at {fitted_at:.0f}"
        self.model = model
        self.rates = RateModel(model)
        # A simulated agent runs time_scale times the predicted job's durations: undone.
        scale = config.simulated.time_scale if config.agent_mode == "simulate" else 1.0
        self.sampler = TelemetrySampler(config.tpm_sample_every_s, scale)
        self.samples_since_fit = 0
        self.telemetry_samples = 0  # training samples taken from heartbeats
        self.refused: dict[str, Any] | None = None  # the newest refit refused, with why

    def node_spec(self, model: ThroughputModel | None = None) -> NodeSpec:
        """The node as the allocator sees it with `model`'s contention curve."""
        return NodeSpec(
            cpu_workers=self._cpu_workers,
            contention=ContentionCurve((model or self.model).contention_points()),
            decoder_capacity=self._config.node.decoder_capacity,
            cpu_cores=self._cpu_cores,
        )

    def sample(
        self, beat: HeartbeatMessage, record: JobRecord, request: JobRequest, now: float
    ) -> None:
        """A training sample from a heartbeat, when the core's sampler takes one."""
        step_time_s = self.sampler.step_time_s(
            Beat(beat.job, beat.iteration, beat.idle_s, beat.step_s), now
        )
        if step_time_s is None:
            return
        settings = record.settings
        row = training_row(
            batch_size_per_gpu=settings.batch_size / settings.gpus,
            flops=request.flops,
            model_params=request.model_params,
            gpus=settings.gpus,
            step_time_s=step_time_s,
        )
        self._store.add_samples("training", [row], time.time(), f"telemetry:{beat.job}")
        self.telemetry_samples += 1
        self.samples_since_fit += 1

    def use(self, result: FitResult, feed: RefitFeed) -> None:
        """Plan with a new fit, or refuse it whole (ModelRejected) and keep the old one. The
        core decides: `ModelRefitted` is fed to it, and its refusal said."""
        rates = RateModel(result.model)
        quality = FitQuality.of_report(result.report)
        event = ModelRefitted(rates, self.node_spec(result.model), quality)
        refusal = feed(event)
        if isinstance(refusal, RefitRejected | RefitUntrusted):
            raise self._refuse(str(refusal), quality)
        if isinstance(refusal, InvalidRequest):
            raise self._refuse(str(RefitRejected(str(refusal))), quality)
        if refusal is not None:
            raise refusal
        self.refused = None
        self.model, self.rates = result.model, rates
        self._store.add_model(time.time(), result.model.to_json(), result.report)
        self.report = result.report
        self.source = f"fitted from stored samples at {time.time():.0f}"
        self.samples_since_fit = 0
        self._store.add_event(None, time.time(), "tpm_fit", {"source": self.source})

    def _refuse(self, reason: str, quality: FitQuality) -> ModelRejected:
        """Remember a refused refit (served with its figures) and say why."""
        now = time.time()
        self.refused = {
            "at": now,
            "reason": reason,
            "training_r2": quality.training_r2,
            "loading_r2": quality.loading_r2,
        }
        self._store.add_event(None, now, "tpm_fit_refused", dict(self.refused))
        log.warning("%s", reason)
        return ModelRejected(reason)
