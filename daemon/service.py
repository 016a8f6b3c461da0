"""The daemon's one writer (STYLE.md): REST calls, agent messages and process exits become
items on one asyncio queue; one task applies them to the scheduler core and the store and
carries out the core's commands.

Admission: a job takes the least loaded GPUs (or CPU training slots on a node without
GPUs) that hold fewer than `node.max_jobs_per_gpu` jobs; while there are none it waits,
first come first served, and only then enters the core's arrival buffer.

Restart: jobs the store holds in a non-final state come back. A job that was running
keeps running if its agent outlived the old daemon: the agent reconnects and says hello,
and the core adopts it with the allocation it reports. Any other job, and a running one
whose agent does not say hello within `reattach_timeout_s`, has its process stopped and is
relaunched from its last checkpoint, which counts as one of its restarts.
"""

import asyncio
import logging
import secrets
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents.protocol import (
    VERSION,
    AgentMessage,
    CancelMessage,
    FailedMessage,
    FinishedMessage,
    HeartbeatMessage,
    Hello,
    PausedMessage,
    PauseMessage,
    ResumedMessage,
    ResumeMessage,
    ShareMessage,
    read_finished_marker,
)
from allocator import ContentionCurve, InvalidRequest, NodeSpec, ThroughputModel
from daemon.agentlink import AgentLink
from daemon.config import DaemonConfig
from scheduler.config import SchedulerConfig
from scheduler.errors import SchedulerError
from scheduler.messages import (
    DEFAULT_PIPELINE,
    AgentHello,
    Allocation,
    Cancel,
    Command,
    Event,
    Failed,
    Finished,
    Heartbeat,
    JobCancelled,
    JobRequest,
    JobSubmitted,
    Launch,
    Pause,
    Paused,
    Record,
    Resume,
    Resumed,
    SetShare,
    Tick,
)
from scheduler.rates import RateModel
from scheduler.scheduler import Scheduler
from scheduler.states import FINAL_STATES, JobState
from daemon.gpus import detect_gpus
from daemon.launcher import Launcher, is_agent, stop_group
from daemon.learning import MIN_STEP_SHARE, fit_rows, training_row
from daemon.metrics import Metrics
from daemon.store import JobRecord, StateDirLock, Store
from tpm import FitResult, FittedTPM, TpmError
from tpm.zoo import model_features

log = logging.getLogger(__name__)

_POLL_S = 0.2  # agent exits are noticed at least this often
_CANCEL_GRACE_S = 5.0
_FINAL = {state.value for state in FINAL_STATES}


class ModelRejected(TpmError):
    """A refit that cannot plan the node's jobs; the old model stays."""


class SubmitError(ValueError):
    """A job the node cannot take; `field` names what to change."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")


@dataclass
class _Submit:
    record: JobRecord
    done: asyncio.Future[None]


@dataclass
class _Cancel:
    job_id: str
    done: asyncio.Future[None]


@dataclass
class _FromAgent:
    message: AgentMessage


@dataclass
class _Samples:
    kind: str
    rows: list[dict[str, object]]
    source: str
    done: asyncio.Future[None]


@dataclass
class _Fitted:
    result: FitResult
    done: asyncio.Future[None]


_Item = _Submit | _Cancel | _FromAgent | _Samples | _Fitted


@dataclass
class Counters:
    plans: int = 0
    pauses: int = 0
    resumes: int = 0
    launches: int = 0
    agent_errors: int = 0  # messages for unknown jobs, or that the core refused
    telemetry_samples: int = 0  # training samples taken from heartbeats


class Service:
    def __init__(self, config: DaemonConfig, model: ThroughputModel) -> None:
        self.config = config
        self.state_dir = config.state_dir
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self._lock = StateDirLock(self.state_dir)  # before touching anything in it
        self.store = Store(self.state_dir / "stoker.db")
        self.link = AgentLink(self.state_dir / "agents.sock")
        self.decoder_endpoint = (
            config.node.decoder_endpoint or f"ipc://{self.state_dir / 'decoder.sock'}"
        )
        self.launcher = Launcher(self.state_dir / "jobs")
        gpus = detect_gpus() if config.node.gpus is None else config.node.gpus
        self.uses_gpus = gpus > 0
        self.slots = gpus if self.uses_gpus else config.node.cpu_slots
        settings = config.scheduler
        self.model_source = "given at start"
        self.model_report: dict[str, Any] = {}
        stored = self.store.latest_model()
        if stored is not None:  # a refit outlives restarts
            fitted_at, text, self.model_report = stored
            model = FittedTPM.from_json(text, "the state file's newest model")
            self.model_source = f"fitted from stored samples at {fitted_at:.0f}"
        self.scheduler_rates = RateModel(model)
        self.node = NodeSpec(
            cpu_workers=config.node.cpu_workers,
            contention=ContentionCurve(model.contention_points()),
            decoder_capacity=config.node.decoder_capacity,
        )
        self.scheduler = Scheduler(
            self.node,
            self.scheduler_rates,
            SchedulerConfig(
                policy=settings.policy,
                arrival_window_s=settings.arrival_window_s,
                completion_window_s=settings.completion_window_s,
                pause_timeout_s=settings.pause_timeout_s,
                heartbeat_timeout_s=settings.heartbeat_timeout_s,
                launch_timeout_s=settings.launch_timeout_s,
                gate=settings.gate,
            ),
        )
        self.counters = Counters()
        self.placement: dict[str, tuple[int, ...]] = {}
        self.waiting: list[str] = []  # admitted, waiting for GPUs
        self.measured: dict[str, dict[str, float]] = {}  # job -> last heartbeat figures
        self.metrics = Metrics()
        self.metrics.watch(self)
        self._queue: asyncio.Queue[_Item] = asyncio.Queue()
        self._beats: dict[str, tuple[float, int]] = {}  # job -> (when, iteration) last sampled
        self._samples_since_fit = 0
        self._records: dict[str, JobRecord] = {}
        self._resume_from: dict[str, str] = {}
        self._cancelled_at: dict[str, float] = {}
        self._awaiting: dict[str, float] = {}  # restored running job -> hello deadline
        self._cold_pauses: dict[str, float] = {}  # cold-resize job paused -> when (epoch s)
        self._agent_versions: dict[str, int] = {}  # protocol version of each agent's hello
        self._started = time.monotonic()
        self.accepting = True

    # ---- called from REST handlers (same event loop) -------------------------------------

    async def submit(self, record: JobRecord) -> None:
        """Queue a new job; returns once it is committed to the store."""
        gpus = int(record.spec["gpus"])
        if gpus > self.slots:
            unit = "GPUs" if self.uses_gpus else "CPU training slots (node.cpu_slots)"
            raise SubmitError("gpus", f"the node has {self.slots} {unit}; ask for at most that")
        indices = record.spec.get("gpu_indices")
        if indices is not None and any(index >= self.slots for index in indices):
            raise SubmitError("gpu_indices", f"GPUs are numbered 0 to {self.slots - 1}")
        # Everything the core will ask of the job, checked before anything is written:
        # UnknownModel or InvalidRequest name the field.
        self.scheduler_rates.job_spec(self._request(record))
        if self.config.agent_mode == "process":
            dataset = self._dataset(record)
            if not (dataset / "index.json").is_file():
                raise SubmitError(
                    "dataset", f"{dataset} holds no dataset; make one with `stoker dataset make`"
                )
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        await self._queue.put(_Submit(record, done))
        await done

    async def cancel(self, job_id: str) -> None:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        await self._queue.put(_Cancel(job_id, done))
        await done

    async def deliver(self, message: AgentMessage) -> None:
        await self._queue.put(_FromAgent(message))

    async def add_samples(self, kind: str, rows: list[dict[str, object]], source: str) -> None:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        await self._queue.put(_Samples(kind, rows, source, done))
        await done

    async def refit(self) -> dict[str, Any]:
        """Fit on the stored samples in a thread, then plan with the result; its report.
        SampleError when the samples cannot make a model."""
        training, loading = self.store.samples("training"), self.store.samples("loading")
        result = await asyncio.to_thread(fit_rows, training, loading)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        await self._queue.put(_Fitted(result, done))
        await done
        return result.report

    async def refit_periodically(self) -> None:
        """Refit every `tpm_refit_s` when new samples came in; errors are logged."""
        while True:
            await asyncio.sleep(self.config.tpm_refit_s)
            if self._samples_since_fit:
                try:
                    await self.refit()
                except TpmError as error:
                    log.warning("periodic TPM refit skipped: %s", error)

    def tenant_of(self, job_id: str) -> str:
        record = self._records.get(job_id)
        return record.tenant if record is not None else ""

    def loader_processes_allocated(self) -> int:
        """Loader processes the jobs holding resources have now."""
        return sum(
            status.allocation.workers_per_gpu * len(self.placement.get(job_id, ()))
            for job_id, status in self.scheduler.jobs().items()
            if status.state.holds_resources and status.allocation is not None
        )

    def now(self) -> float:
        return time.monotonic() - self._started

    # ---- the writer ------------------------------------------------------------------------

    async def run(self) -> None:
        """Apply queued items and timer ticks until cancelled."""
        self._restore()
        while True:
            deadline = self.scheduler.next_deadline()
            wait = _POLL_S if deadline is None else min(_POLL_S, max(0.0, deadline - self.now()))
            try:
                item = await asyncio.wait_for(self._queue.get(), timeout=wait)
            except TimeoutError:
                item = None
            try:
                if item is not None:
                    self._apply(item)
                self._feed(Tick())
                self._reap()
            except Exception:  # a bug in one item must not stop the daemon
                log.exception("error applying %r", item)
                if not isinstance(item, _FromAgent | None) and not item.done.done():
                    item.done.set_exception(RuntimeError("internal error; see the daemon log"))

    def _apply(self, item: _Item) -> None:
        match item:
            case _Submit(record=record, done=done):
                self.store.add_job(record)  # committed before the reply
                self._records[record.id] = record
                self.waiting.append(record.id)
                _resolve(done)
                self._admit()
            case _Cancel(job_id=job_id, done=done):
                if job_id in self.waiting:
                    self.waiting.remove(job_id)
                    self._set_state(job_id, JobState.CANCELLED.value, "cancelled while waiting")
                elif job_id in self._awaiting:  # restored, its agent not heard from yet
                    del self._awaiting[job_id]
                    stored = self.store.job(job_id)
                    if stored is not None and stored.pid is not None:
                        stop_group(stored.pid, grace_s=2.0)
                    self._set_state(job_id, JobState.CANCELLED.value, "cancelled while restoring")
                elif self.store_state(job_id) not in _FINAL:
                    self._feed(JobCancelled(job_id))
                _resolve(done)
            case _FromAgent(message=message):
                self._from_agent(message)
            case _Samples(kind=kind, rows=rows, source=source, done=done):
                self.store.add_samples(kind, rows, time.time(), source)
                self._samples_since_fit += len(rows)
                _resolve(done)
            case _Fitted(result=result, done=done):
                try:
                    self._use_model(result)
                except ModelRejected as error:
                    if not done.done():  # the caller may have gone
                        done.set_exception(error)
                else:
                    _resolve(done)

    def store_state(self, job_id: str) -> str:
        record = self.store.job(job_id)
        return record.state if record else ""

    def _from_agent(self, message: AgentMessage) -> None:
        if message.job not in self._records:
            self.counters.agent_errors += 1
            log.warning(
                "job %s: message %s for a job this daemon does not run", message.job, message.type
            )
            return
        if message.job in self._awaiting:
            self._reattach(message)
            return
        event: Event
        match message:
            case Hello():
                self._agent_versions[message.job] = message.v
                event = AgentHello(message.job, message.gen, message.iteration)
            case HeartbeatMessage():
                self._sample_training(message)
                busy = message.idle_s + message.step_s
                self.measured[message.job] = {
                    "samples_per_s": message.samples_per_s,
                    "idle_fraction": message.idle_s / busy if busy > 0 else 0.0,
                    "iteration": float(message.iteration),
                    "decoder_share": message.share,
                }
                event = Heartbeat(
                    message.job,
                    message.gen,
                    message.iteration,
                    message.samples_per_s,
                    message.idle_s / busy if busy > 0 else 0.0,
                    message.workers,
                )
            case PausedMessage():
                if self._cold(message.job):  # its process exits now; Resume relaunches it
                    self._cold_pauses[message.job] = message.ts or time.time()
                if message.checkpoint:
                    self.store.update_job(
                        message.job,
                        time.time(),
                        checkpoint=message.checkpoint,
                        iteration=message.iteration,
                    )
                event = Paused(message.job, message.gen, message.iteration, message.checkpoint)
            case ResumedMessage():
                self.metrics.pause_gap.observe(message.gap_s)
                self.store.add_event(
                    message.job,
                    time.time(),
                    "resumed",
                    {"gen": message.gen, "workers": message.workers, "gap_s": message.gap_s},
                )
                event = Resumed(message.job, message.gen, message.workers, message.gap_s)
            case FinishedMessage():
                self.store.update_job(message.job, time.time(), iteration=message.iteration)
                event = Finished(message.job)
            case FailedMessage():
                event = Failed(message.job, message.error)
        self._feed(event)

    def _feed(self, event: Event) -> None:
        try:
            commands = self.scheduler.handle(event, self.now())
        except (SchedulerError, InvalidRequest, TpmError) as error:
            self.counters.agent_errors += 1
            log.warning("event %s refused by the scheduler: %s", type(event).__name__, error)
            return
        self._carry_out_all(commands)

    def _carry_out_all(self, commands: Sequence[Command]) -> None:
        """Every command, even when one fails: a launch that fails is the job's failure."""
        for command in commands:
            try:
                self._carry_out(command)
            except Exception as error:
                log.exception("carrying out %r", command)
                if isinstance(command, Launch):
                    self._feed(Failed(command.job_id, f"launch failed: {error}"))

    # ---- the throughput model --------------------------------------------------------------

    def _sample_training(self, beat: HeartbeatMessage) -> None:
        """A training sample from a heartbeat whose job spent at least 95 % of the interval
        computing (DESIGN.md), one per job per `tpm_sample_every_s` at most."""
        busy = beat.idle_s + beat.step_s
        last = self._beats.get(beat.job)
        now = self.now()
        if last is None or beat.iteration <= last[1]:
            self._beats[beat.job] = (now, beat.iteration)
            return
        if now - last[0] < self.config.tpm_sample_every_s:
            return
        steps = beat.iteration - last[1]
        self._beats[beat.job] = (now, beat.iteration)
        if busy <= 0 or beat.step_s / busy < MIN_STEP_SHARE:
            return
        spec = self._records[beat.job].spec
        features = model_features(spec["model"])
        # A simulated agent runs time_scale times the predicted job's speed: undo it.
        scale = self.config.simulated.time_scale if self.config.agent_mode == "simulate" else 1
        row = training_row(
            batch_size_per_gpu=spec["batch_size"] / spec["gpus"],
            flops=features.flops,
            model_params=features.model_params,
            gpus=spec["gpus"],
            step_time_s=busy / steps / scale,
        )
        self.store.add_samples("training", [row], time.time(), f"telemetry:{beat.job}")
        self.counters.telemetry_samples += 1
        self._samples_since_fit += 1

    def _use_model(self, result: FitResult) -> None:
        """Plan with a new fit, or refuse it whole (ModelRejected) and keep the old one."""
        rates = RateModel(result.model)
        try:
            result.model.predict_sample_cost_s(DEFAULT_PIPELINE)
            node = NodeSpec(
                cpu_workers=self.config.node.cpu_workers,
                contention=ContentionCurve(result.model.contention_points()),
                decoder_capacity=self.config.node.decoder_capacity,
            )
            self.scheduler.use_model(rates, node)  # re-predicts every live job, or raises
        except (TpmError, InvalidRequest) as error:
            raise ModelRejected(f"the new fit cannot plan this node's jobs: {error}") from None
        self.scheduler_rates, self.node = rates, node
        self.store.add_model(time.time(), result.model.to_json(), result.report)
        self.model_report = result.report
        self.model_source = f"fitted from stored samples at {time.time():.0f}"
        self._samples_since_fit = 0
        self.store.add_event(None, time.time(), "tpm_fit", {"source": self.model_source})

    # ---- commands --------------------------------------------------------------------------

    def _carry_out(self, command: Command) -> None:
        match command:
            case Record():
                self._record(command)
            case Launch():
                self._launch(command)
            case Pause(job_id=job_id, gen=gen):
                self.counters.pauses += 1
                self._send(PauseMessage(job=job_id, gen=gen))
            case Resume(job_id=job_id, gen=gen, allocation=allocation):
                self.counters.resumes += 1
                if job_id in self._cold_pauses:
                    self._resume_cold(job_id, gen, allocation)
                    return
                self._send(
                    ResumeMessage(
                        job=job_id,
                        gen=gen,
                        workers_per_gpu=allocation.workers_per_gpu,
                        decoder_share=allocation.decoder_share,
                        decode_mode=allocation.decode_mode,
                    )
                )
            case SetShare(job_id=job_id, gen=gen, decoder_share=share):
                if self._agent_versions.get(job_id, VERSION) < 2:  # `share` is new in v2
                    log.warning("job %s: agent speaks protocol v1; new share waits", job_id)
                    return
                self._send(ShareMessage(job=job_id, gen=gen, decoder_share=share))
                self.store.add_event(job_id, time.time(), "share", {"gen": gen, "share": share})
            case Cancel(job_id=job_id):
                self._send(CancelMessage(job=job_id))
                self._cancelled_at[job_id] = self.now()

    def _send(self, message: PauseMessage | ResumeMessage | ShareMessage | CancelMessage) -> None:
        asyncio.get_running_loop().create_task(self.link.send(message))

    def _record(self, command: Record) -> None:
        data: dict[str, Any] = dict(command.data)
        if command.kind == "state" and command.job_id is not None:
            self._set_state(command.job_id, str(data["to"]), str(data.get("why", "")), data)
            return
        if command.kind == "restart" and command.job_id is not None:
            self.store.update_job(command.job_id, time.time(), restarts=data["restarts"])
        if command.kind == "plan":
            self.counters.plans += 1
            allocations = data.get("allocations", {})
            assert isinstance(allocations, dict)
            self.store.add_plan(
                int(data["gen"]), time.time(), self.config.scheduler.policy, allocations
            )
        self.store.add_event(command.job_id, time.time(), command.kind, data)

    def _set_state(
        self, job_id: str, state: str, why: str, data: dict[str, Any] | None = None
    ) -> None:
        self.store.update_job(job_id, time.time(), state=state)
        self.store.add_event(job_id, time.time(), "state", data or {"to": state, "why": why})
        if state == JobState.SUBMITTED.value and self.launcher.running(job_id):
            self.launcher.stop(job_id, grace_s=0.0)  # lost or died: the restart needs it gone
        if state in _FINAL:
            self.placement.pop(job_id, None)
            self.measured.pop(job_id, None)
            if self.launcher.running(job_id) and job_id not in self._cancelled_at:
                self._cancelled_at[job_id] = self.now()  # lost or failed: make sure it is gone
            self._admit()

    def _launch(self, command: Launch) -> None:
        resume_from = command.resume_from or self._resume_from.pop(command.job_id, "")
        self._start_agent(command.job_id, command.gen, command.allocation, resume_from)

    def _resume_cold(self, job_id: str, gen: int, allocation: Allocation) -> None:
        """A cold-resize job's agent exited after `paused`: start a new one from the
        checkpoint with the new allocation; it says `resumed` after its first step."""
        paused_at = self._cold_pauses.pop(job_id)
        stored = self.store.job(job_id)
        checkpoint = stored.checkpoint if stored is not None else ""
        self._start_agent(job_id, gen, allocation, checkpoint, paused_at=paused_at)

    def _start_agent(
        self,
        job_id: str,
        gen: int,
        allocation: Allocation,
        resume_from: str,
        paused_at: float | None = None,
    ) -> None:
        record = self._records[job_id]
        self.counters.launches += 1
        if self.launcher.running(job_id):
            self.launcher.stop(job_id, grace_s=2.0)
        argv = self._agent_argv(record, gen, allocation, resume_from)
        if paused_at is not None:
            argv += ["--paused-at", repr(paused_at)]
        indices = ",".join(str(index) for index in self.placement.get(job_id, ()))
        env = {"CUDA_VISIBLE_DEVICES": indices} if self.uses_gpus else {"STOKER_CPU_SLOTS": indices}
        pid = self.launcher.launch(job_id, argv, env)
        self.store.update_job(job_id, time.time(), pid=pid)

    def _cold(self, job_id: str) -> bool:
        """Whether the job resizes cold: its agent exits after each pause."""
        record = self._records.get(job_id)
        cold = record is not None and record.spec.get("resize") == "cold"
        return cold and self.config.agent_mode == "process"

    def _agent_argv(
        self, record: JobRecord, gen: int, allocation: Allocation, resume_from: str
    ) -> list[str]:
        """The agent's command line: the PyTorch master (`process`) or a simulated one."""
        spec = record.spec
        common = [
            "--job", record.id,
            "--endpoint", self.link.endpoint,
            "--iterations", str(spec["iterations"]),
            "--batch-size", str(spec["batch_size"]),
            "--gpus", str(spec["gpus"]),
            "--workers", str(allocation.workers_per_gpu),
            "--decode-mode", allocation.decode_mode,
            "--decoder-share", repr(allocation.decoder_share),
            "--decoder-endpoint", self.decoder_endpoint,
            "--gen", str(gen),
            "--checkpoint-dir", str(self.launcher.job_dir(record.id)),
            "--heartbeat-s", str(self.config.heartbeat_s),
        ]  # fmt: skip
        if resume_from:
            common += ["--resume-from", resume_from]
        if self.config.agent_mode == "process":
            training = self.config.training
            argv = [
                sys.executable, "-m", "agents.master", *common,
                "--model", spec["model"],
                "--dataset", str(self._dataset(record)),
                "--image-size", str(training.image_size),
                "--seed", str(training.seed),
            ]  # fmt: skip
            if spec.get("resize") == "cold":
                argv.append("--cold-resize")
            return [*argv, "--audit"] if spec.get("audit_samples") else argv
        simulated = self.config.simulated
        predicted = self.scheduler_rates.job_spec(self._request(record))
        scale = simulated.time_scale
        return [
            sys.executable, "-m", "agents.simulated", *common,
            "--step-time-s", str(predicted.step_time_s * scale),
            "--sample-cost-s", str(predicted.sample_cost_s * scale),
            "--pause-s", str(simulated.pause_s * scale),
            "--resume-s", str(simulated.resume_s * scale),
        ]  # fmt: skip

    def _dataset(self, record: JobRecord) -> Path:
        given = record.spec.get("dataset") or self.config.training.default_dataset
        if given is None:
            raise SubmitError(
                "dataset",
                "give a folder made by `stoker dataset make DIR`, or set "
                "training.default_dataset in the daemon's config",
            )
        return Path(given)

    # ---- admission, exits, restart ----------------------------------------------------------

    def _admit(self) -> None:
        """Place waiting jobs, first come first served, while GPUs are free."""
        while self.waiting:
            job_id = self.waiting[0]
            record = self._records[job_id]
            place = self._free_gpus(int(record.spec["gpus"]), record.spec.get("gpu_indices"))
            if place is None:
                return
            self.waiting.pop(0)
            self.placement[job_id] = place
            self.store.update_job(job_id, time.time(), placement=place)
            self._feed(JobSubmitted(self._request(record)))

    def _free_gpus(self, count: int, indices: Sequence[int] | None) -> tuple[int, ...] | None:
        load = [0] * self.slots
        for held in self.placement.values():
            for index in held:
                if index < self.slots:  # a restored placement on a node configured smaller
                    load[index] += 1
        cap = self.config.node.max_jobs_per_gpu
        if indices is not None:
            return tuple(indices) if all(load[i] < cap for i in indices) else None
        free = sorted((held, index) for index, held in enumerate(load) if held < cap)
        return tuple(sorted(index for _, index in free[:count])) if len(free) >= count else None

    def _request(self, record: JobRecord) -> JobRequest:
        spec = record.spec
        features = model_features(spec["model"])
        stored = self.store.job(record.id)
        return JobRequest(
            id=record.id,
            gpus=int(spec["gpus"]),
            batch_size=int(spec["batch_size"]),
            iterations=int(spec["iterations"]),
            model_params=features.model_params,
            flops=features.flops,
            max_restarts=(
                self.config.max_restarts
                if spec.get("max_restarts") is None
                else int(spec["max_restarts"])
            ),
            restarts=stored.restarts if stored is not None else 0,
        )

    def _reap(self) -> None:
        for job_id, code in self.launcher.exited():
            self._cancelled_at.pop(job_id, None)
            status = self.scheduler.jobs().get(job_id)
            if status is None or not status.state.holds_resources:
                continue
            if code == 0 and job_id in self._cold_pauses:
                continue  # a cold resize: it checkpointed and left, as asked
            if code in (0, None) and self._finished_marker(job_id) is not None:
                self._feed(Finished(job_id))  # it exited before its `finished` was read
            else:
                self._feed(Failed(job_id, f"agent exited with code {code}"))
        for job_id, deadline in list(self._awaiting.items()):
            if self.now() >= deadline:
                self._relaunch(job_id, "its agent did not say hello to the restarted daemon")
                self._admit()
        for job_id, since in list(self._cancelled_at.items()):
            if self.now() - since >= _CANCEL_GRACE_S:
                del self._cancelled_at[job_id]
                self.launcher.stop(job_id, grace_s=0.5)

    def _restore(self) -> None:
        """Bring back every job a previous daemon left unfinished. A job that cannot come
        back (its model left the zoo, the new model cannot predict it) is marked failed
        with the reason; the others come back regardless."""
        clean = self.store.take_clean_stop()
        for record in self.store.jobs():
            if record.state in _FINAL:
                continue
            try:
                self._restore_one(record, clean)
            except Exception as error:  # one job's problem must not keep the rest out
                log.exception("job %s: cannot be restored", record.id)
                self._set_state(record.id, JobState.FAILED.value, f"cannot be restored: {error}")
        self._admit()

    def _restore_one(self, record: JobRecord, clean: bool) -> None:
        self._records[record.id] = record
        self.scheduler_rates.job_spec(self._request(record))  # still plannable?
        finished = self._finished_marker(record.id)
        if finished is not None:  # it ended while no daemon listened
            self.store.update_job(record.id, time.time(), iteration=finished, pid=None)
            self._set_state(
                record.id, JobState.COMPLETED.value, "finished while the daemon was down"
            )
            return
        if record.checkpoint:
            self._resume_from[record.id] = record.checkpoint
        running = record.state == JobState.RUNNING.value
        ours = record.pid is not None and is_agent(record.pid, record.id)
        placed = all(index < self.slots for index in record.placement)
        if running and ours and placed and not clean:
            # Its agent may still be training: wait for its hello before relaunching.
            self.placement[record.id] = record.placement
            self._awaiting[record.id] = self.now() + self.config.reattach_timeout_s
            self.store.add_event(record.id, time.time(), "restored", {"was": record.state})
            return
        why = "the daemon was stopped" if clean else "the daemon restarted"
        self._relaunch(record.id, f"{why} while it was {record.state}", count=not clean)

    def _finished_marker(self, job_id: str) -> int | None:
        """The final iteration an agent wrote when it finished, if it did."""
        return read_finished_marker(self.launcher.jobs_dir / job_id)

    def _reattach(self, message: AgentMessage) -> None:
        """The first word from a restored running job's agent: adopt it if it runs."""
        job_id = message.job
        record = self._records[job_id]
        if not isinstance(message, Hello):
            return  # sent before the reconnect; its hello follows
        del self._awaiting[job_id]
        if message.state != "running" or message.workers < 1 or message.pid != record.pid:
            # Paused or starting: it holds no checkpoint we could trust more than ours.
            self._relaunch(job_id, f"its agent came back {message.state}")
            self._admit()
            return
        self.launcher.adopt(job_id, message.pid)
        allocation = Allocation(message.workers, message.share)
        self._carry_out_all(
            self.scheduler.adopt(self._request(record), allocation, message.iteration, self.now())
        )

    def _relaunch(self, job_id: str, why: str, *, count: bool = True) -> None:
        """Stop whatever is left of the job's agent and queue it to start again from its
        last checkpoint; `count` it against its restarts unless it was stopped cleanly."""
        self._awaiting.pop(job_id, None)
        record = self.store.job(job_id)
        assert record is not None
        if record.pid is not None and is_agent(record.pid, job_id):
            stop_group(record.pid, grace_s=2.0)
        self.placement.pop(job_id, None)
        started = record.state not in (JobState.SUBMITTED.value, JobState.PENDING.value)
        restarts = record.restarts + (started and count)
        if restarts > self._request(record).max_restarts:
            self.store.update_job(job_id, time.time(), pid=None, placement=())
            self._set_state(job_id, JobState.FAILED.value, f"{why}; no restarts left")
            return
        self.store.update_job(
            job_id, time.time(), state="submitted", pid=None, restarts=restarts, placement=()
        )
        self.store.add_event(job_id, time.time(), "restored", {"was": record.state, "why": why})
        self._records[job_id] = record
        self.waiting.append(job_id)

    async def shutdown(self) -> None:
        """Stop accepting; ask every running agent to pause, so that it writes a checkpoint,
        and wait up to `shutdown_grace_s` for them; stop their processes; mark the stop
        clean (the next start counts no restart for it); close the store."""
        self.accepting = False
        running = [
            job_id
            for job_id, status in self.scheduler.jobs().items()
            if status.state is JobState.RUNNING and self.launcher.running(job_id)
        ]
        for job_id in running:
            await self.link.send(PauseMessage(job=job_id, gen=self.scheduler.generation + 1))
        await self._collect_checkpoints(set(running), self.config.shutdown_grace_s)
        await asyncio.to_thread(self.launcher.stop_all, 2.0)
        self.store.mark_clean_stop()
        self.link.close()
        self.store.close()
        self._lock.release()

    async def _collect_checkpoints(self, waiting: set[str], grace_s: float) -> None:
        """Record the checkpoints of `paused` replies until all came or time is up."""
        deadline = self.now() + grace_s
        while waiting and self.now() < deadline:
            message = await self.link.receive(timeout_s=deadline - self.now())
            if isinstance(message, PausedMessage) and message.job in waiting:
                waiting.discard(message.job)
                if message.checkpoint:
                    self.store.update_job(
                        message.job,
                        time.time(),
                        checkpoint=message.checkpoint,
                        iteration=message.iteration,
                    )


def _resolve(done: asyncio.Future[None]) -> None:
    """Answer a waiting REST call, unless its client went away and cancelled it."""
    if not done.done():
        done.set_result(None)


def new_job_id(name: str) -> str:
    return f"{name[:40]}-{secrets.token_hex(3)}"
