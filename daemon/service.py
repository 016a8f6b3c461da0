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
from typing import Any

from agents.protocol import (
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
)
from allocator import ContentionCurve, NodeSpec, ThroughputModel
from daemon.agentlink import AgentLink
from daemon.config import DaemonConfig
from daemon.core.config import SchedulerConfig
from daemon.core.errors import SchedulerError
from daemon.core.messages import (
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
    Tick,
)
from daemon.core.rates import RateModel
from daemon.core.scheduler import Scheduler
from daemon.core.states import FINAL_STATES, JobState
from daemon.gpus import detect_gpus
from daemon.launcher import Launcher, alive, stop_group
from daemon.learning import MIN_STEP_SHARE, fit_rows, training_row
from daemon.metrics import Metrics
from daemon.store import JobRecord, Store
from tpm import FitResult, FittedTPM, TpmError
from tpm.zoo import model_features

log = logging.getLogger(__name__)

_POLL_S = 0.2  # agent exits are noticed at least this often
_CANCEL_GRACE_S = 5.0
_FINAL = {state.value for state in FINAL_STATES}


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
        self.store = Store(self.state_dir / "stoker.db")
        self.link = AgentLink(self.state_dir / "agents.sock")
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
                done.set_result(None)
                self._admit()
            case _Cancel(job_id=job_id, done=done):
                if job_id in self.waiting:
                    self.waiting.remove(job_id)
                    self._set_state(job_id, JobState.CANCELLED.value, "cancelled while waiting")
                elif self.store_state(job_id) not in _FINAL:
                    self._feed(JobCancelled(job_id))
                done.set_result(None)
            case _FromAgent(message=message):
                self._from_agent(message)
            case _Samples(kind=kind, rows=rows, source=source, done=done):
                self.store.add_samples(kind, rows, time.time(), source)
                self._samples_since_fit += len(rows)
                done.set_result(None)
            case _Fitted(result=result, done=done):
                self._use_model(result)
                done.set_result(None)

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
                event = AgentHello(message.job, message.gen, message.iteration)
            case HeartbeatMessage():
                self._sample_training(message)
                busy = message.idle_s + message.step_s
                self.measured[message.job] = {
                    "samples_per_s": message.samples_per_s,
                    "idle_fraction": message.idle_s / busy if busy > 0 else 0.0,
                    "iteration": float(message.iteration),
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
        except SchedulerError as error:
            self.counters.agent_errors += 1
            log.warning("event %s refused by the scheduler: %s", type(event).__name__, error)
            return
        for command in commands:
            self._carry_out(command)

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
        self.store.add_model(time.time(), result.model.to_json(), result.report)
        self.model_report = result.report
        self.model_source = f"fitted from stored samples at {time.time():.0f}"
        self.scheduler_rates = RateModel(result.model)
        self.node = NodeSpec(
            cpu_workers=self.config.node.cpu_workers,
            contention=ContentionCurve(result.model.contention_points()),
        )
        self.scheduler.use_model(self.scheduler_rates, self.node)
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
                self._send(
                    ResumeMessage(
                        job=job_id,
                        gen=gen,
                        workers_per_gpu=allocation.workers_per_gpu,
                        decoder_share=allocation.decoder_share,
                        decode_mode=allocation.decode_mode,
                    )
                )
            case Cancel(job_id=job_id):
                self._send(CancelMessage(job=job_id))
                self._cancelled_at[job_id] = self.now()

    def _send(self, message: PauseMessage | ResumeMessage | CancelMessage) -> None:
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
        record = self._records[command.job_id]
        self.counters.launches += 1
        if self.launcher.running(command.job_id):
            self.launcher.stop(command.job_id, grace_s=0.0)
        resume_from = command.resume_from or self._resume_from.pop(command.job_id, "")
        argv = self._agent_argv(
            record, command.gen, command.allocation.workers_per_gpu, resume_from
        )
        indices = ",".join(str(index) for index in self.placement.get(command.job_id, ()))
        env = {"CUDA_VISIBLE_DEVICES": indices} if self.uses_gpus else {"STOKER_CPU_SLOTS": indices}
        pid = self.launcher.launch(command.job_id, argv, env)
        self.store.update_job(command.job_id, time.time(), pid=pid)

    def _agent_argv(self, record: JobRecord, gen: int, workers: int, resume_from: str) -> list[str]:
        spec, simulated = record.spec, self.config.simulated
        predicted = self.scheduler_rates.job_spec(self._request(record))
        scale = simulated.time_scale
        argv = [
            sys.executable, "-m", "agents.simulated",
            "--job", record.id,
            "--endpoint", self.link.endpoint,
            "--iterations", str(spec["iterations"]),
            "--batch-size", str(spec["batch_size"]),
            "--workers", str(workers),
            "--gen", str(gen),
            "--checkpoint-dir", str(self.launcher.job_dir(record.id)),
            "--gpus", str(spec["gpus"]),
            "--step-time-s", str(predicted.step_time_s * scale),
            "--sample-cost-s", str(predicted.sample_cost_s * scale),
            "--pause-s", str(simulated.pause_s * scale),
            "--resume-s", str(simulated.resume_s * scale),
            "--heartbeat-s", str(self.config.heartbeat_s),
        ]  # fmt: skip
        if resume_from:
            argv += ["--resume-from", resume_from]
        return argv

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
                load[index] += 1
        cap = self.config.node.max_jobs_per_gpu
        if indices is not None:
            return tuple(indices) if all(load[i] < cap for i in indices) else None
        free = sorted((held, index) for index, held in enumerate(load) if held < cap)
        return tuple(sorted(index for _, index in free[:count])) if len(free) >= count else None

    def _request(self, record: JobRecord) -> JobRequest:
        spec = record.spec
        features = model_features(spec["model"])
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
        )

    def _reap(self) -> None:
        for job_id, code in self.launcher.exited():
            self._cancelled_at.pop(job_id, None)
            status = self.scheduler.jobs().get(job_id)
            if status is not None and status.state.holds_resources:
                self._feed(Failed(job_id, f"agent exited with code {code}"))
        for job_id, deadline in list(self._awaiting.items()):
            if self.now() >= deadline:
                self._relaunch(job_id, "its agent did not say hello to the restarted daemon")
        for job_id, since in list(self._cancelled_at.items()):
            if self.now() - since >= _CANCEL_GRACE_S:
                del self._cancelled_at[job_id]
                self.launcher.stop(job_id, grace_s=0.5)

    def _restore(self) -> None:
        """Bring back every job a previous daemon left unfinished."""
        for record in self.store.jobs():
            if record.state in _FINAL:
                continue
            self._records[record.id] = record
            if record.checkpoint:
                self._resume_from[record.id] = record.checkpoint
            running = record.state == JobState.RUNNING.value
            if running and record.pid is not None and alive(record.pid):
                # Its agent may still be training: wait for its hello before relaunching.
                self.placement[record.id] = record.placement
                self._awaiting[record.id] = self.now() + self.config.reattach_timeout_s
                self.store.add_event(record.id, time.time(), "restored", {"was": record.state})
            else:
                self._relaunch(record.id, f"the daemon restarted while it was {record.state}")
        self._admit()

    def _reattach(self, message: AgentMessage) -> None:
        """The first word from a restored running job's agent: adopt it if it runs."""
        job_id = message.job
        record = self._records[job_id]
        if not isinstance(message, Hello):
            return  # sent before the reconnect; its hello follows
        del self._awaiting[job_id]
        if message.state != "running" or message.workers < 1 or message.pid != record.pid:
            self._relaunch(job_id, f"its agent came back {message.state}")
            self._admit()
            return
        self.launcher.adopt(job_id, message.pid)
        allocation = Allocation(message.workers, message.share)
        for command in self.scheduler.adopt(
            self._request(record), allocation, message.iteration, self.now()
        ):
            self._carry_out(command)

    def _relaunch(self, job_id: str, why: str) -> None:
        """Stop whatever is left of the job's agent and queue it to start again from its
        last checkpoint."""
        self._awaiting.pop(job_id, None)
        record = self.store.job(job_id)
        assert record is not None
        if record.pid is not None:
            stop_group(record.pid, grace_s=2.0)
        self.placement.pop(job_id, None)
        started = record.state not in (JobState.SUBMITTED.value, JobState.PENDING.value)
        restarts = record.restarts + started
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
        """Stop accepting, tell agents, stop their processes, close the store."""
        self.accepting = False
        for job_id in list(self.placement):
            await self.link.send(CancelMessage(job=job_id))
        await asyncio.to_thread(self.launcher.stop_all, 2.0)
        self.link.close()
        self.store.close()


def new_job_id(name: str) -> str:
    return f"{name[:40]}-{secrets.token_hex(3)}"
