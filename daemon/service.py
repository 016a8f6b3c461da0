"""The daemon's one writer (STYLE.md): REST calls, agent messages and process exits become
items on one asyncio queue; one task turns each into an event for the scheduler core
(`scheduler/`), which decides everything, and carries out the commands it returns
(`daemon/actions.py`). Bringing back what an earlier daemon left is `daemon/restore.py`.

Readers never touch this object's insides: they read `snapshot()` and the store.
"""

import asyncio
import contextlib
import hmac
import logging
import os
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from agents.protocol import (
    AgentMessage,
    AliveMessage,
    FailedMessage,
    FinishedMessage,
    HeartbeatMessage,
    Hello,
    MetricsMessage,
    PausedMessage,
    ResumedMessage,
)
from allocator import InvalidRequest, ThroughputModel
from daemon import continuing, private
from daemon.actions import Actions
from daemon.agentargs import own_ranks, unstartable
from daemon.agentlink import AgentLink
from daemon.config import DaemonConfig
from daemon.host import detect_node, simulated_node
from daemon.items import (
    CancelCall,
    Fitted,
    FromAgent,
    IdTaken,
    Item,
    QuotaExceeded,
    Replayed,
    SamplesCall,
    SubmitCall,
    SubmitError,
)
from daemon.jobspec import JobSettings
from daemon.launcher import Launcher
from daemon.learning import fit_rows
from daemon.limits import Limits
from daemon.logcap import cap_logs_forever
from daemon.metrics import Metrics
from daemon.progress import Pace
from daemon.refused import say_refused
from daemon.restore import Restorer
from daemon.snapshot import Counts, LiveJob, Measured, NodeSnapshot
from daemon.statelock import URL_FILE, StateDirLock, StoreError, local_url
from daemon.store import JobRecord, StateLost, Store
from daemon.tenants import (
    UnixUser,
    check_stored_tenants,
    closed_parents,
    unix_users,
    user_warnings,
)
from daemon.tpmkeeper import ModelRejected, TpmKeeper
from daemon.workdirs import checked_workdir, inside_roots
from daemon.zoodata import check_dataset, zoo_image_size
from scheduler.admission import GpuPool, TenantShare
from scheduler.errors import SchedulerError, UnknownJob
from scheduler.messages import (
    AgentHello,
    Alive,
    Command,
    Event,
    Failed,
    Finished,
    Heartbeat,
    JobCancelled,
    JobRequest,
    JobSubmitted,
    Paused,
    Resumed,
    Tick,
)
from scheduler.scheduler import JobStatus, Scheduler
from scheduler.states import JobState
from tpm import TpmError

log = logging.getLogger(__name__)

_POLL_S = 0.2  # agent exits are noticed at least this often
_UNTICKED_MAX = 1000  # queued items applied before time is let pass, at most
STATE_CHECK_S = 5.0  # the state file is checked for being deleted or replaced this often
# On the way out, how long the agents that paused get to leave by themselves (stopping
# their loader workers), before their process groups are stopped.
LEAVE_WAIT_S = 5.0


# Sees every event the core gets and the commands it answers with (the twin test).
Observer = Callable[[Event, float, Sequence[Command]], None]


class Service:
    def __init__(
        self,
        config: DaemonConfig,
        model: ThroughputModel,
        *,
        clock: Callable[[], float] = time.monotonic,
        launcher: Launcher | None = None,
    ) -> None:
        self.config = config
        # Absolute: agents and command jobs run in other directories (a job's workdir) and
        # must reach the same socket and write to the same job folders.
        self.state_dir = config.state_dir.resolve()
        os.umask(private.UMASK)  # what it and its jobs write is their owner's alone
        self.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._lock = StateDirLock(self.state_dir)  # before touching anything in it
        # Where it listens, for the CLI on this machine: a daemon on another port than the
        # default is found from its state dir (cli/client.py).
        (self.state_dir / URL_FILE).write_text(local_url(config.host, config.port) + "\n")
        self.users = unix_users(config)
        opened = private.tighten(self.state_dir, passable=bool(self.users))
        if opened:
            log.warning("%d paths in %s were open to others: now 0600/0700", opened, self.state_dir)
        self.store = _opened(self.state_dir / "stoker.db", config.limits)
        try:
            check_stored_tenants(self.store, config)  # never launch a tenant's job as root
        except StoreError:
            self.store.close()
            self._lock.release()
            raise
        self.link = AgentLink(
            self.state_dir / "agents.sock",
            list(self.users.values()),
            self.job_user_name,
            trusted=self.launched_by,
        )
        self.decoder_endpoint = (
            config.node.decoder_endpoint or f"ipc://{self.state_dir / 'decoder.sock'}"
        )
        self.launcher = launcher or Launcher(self.state_dir / "jobs", config.limits)
        self.warnings = (
            user_warnings(config, self.users)
            + closed_parents(self.state_dir, self.users)
            + ((self.launcher.cgroup_warning,) if self.launcher.cgroup_warning else ())
        )
        for warning in self.warnings:
            log.warning("%s", warning)
        # What the config leaves unset, from the host; simulated agents simulate a node.
        simulated = config.agent_mode == "simulate"
        self.node = detect_node(simulated_node(config.node) if simulated else config.node)
        self.uses_gpus = self.node.uses_gpus
        self.slots = self.node.slots
        # A node that trains on its CPUs plans on one budget of them (allocator/cpunode.py);
        # not with `node.cpu_sets`, where each job keeps to its own cores.
        shared = not self.uses_gpus and not self.node.cpu_sets
        cores = float(self.node.cpus.usable) if shared else None
        self.tpm = TpmKeeper(config, self.store, model, self.node.cpu_workers, cores)
        self.scheduler = Scheduler(
            self.tpm.node_spec(),
            self.tpm.rates,
            config.scheduler,
            GpuPool(
                self.slots,
                config.node.max_jobs_per_gpu,
                {
                    name: TenantShare(policy.weight, policy.max_running_jobs)
                    for name, policy in config.tenants.items()
                },
            ),
        )
        self.counters = Counts()
        self.records: dict[str, JobRecord] = {}  # every job this daemon runs or ran
        self.measured: dict[str, Measured] = {}  # job -> its last heartbeat
        self.pace = Pace()  # each running job's iterations over its last minute
        self.reported: dict[str, dict[str, float]] = {}  # job -> its newest reported values
        self.metrics = Metrics()
        self.metrics.watch(self.snapshot)
        self.actions = Actions(self)
        self.restorer = Restorer(self)
        self.observer: Observer | None = None
        self.accepting = True
        self._clock = clock
        self._started = clock()
        self._queue: asyncio.Queue[Item] = asyncio.Queue()
        self._unticked = 0  # items applied since the writer last let time pass (`step`)
        self._agent_versions: dict[str, int] = {}  # protocol version of each agent's hello
        self._lost: str | None = None  # why the state file can no longer be trusted
        # job -> the secret of its current launch (stored: a restart re-attaches with it);
        # the jobs whose agent has proved it, after which every message must carry it.
        self.agent_secrets: dict[str, str] = {}
        self._secured: set[str] = set()
        # job -> where its script last said it ends, and the samples its steps take
        self._said: dict[str, tuple[int, int]] = {}

    # ---- called from REST handlers (same event loop) -------------------------------------

    async def submit(self, record: JobRecord, idempotency: tuple[str, str] | None = None) -> None:
        """Queue a new job; returns once it is committed to the store. `idempotency`: the
        submit's (Idempotency-Key, body digest); Replayed if the key made a job before."""
        settings = record.settings
        # The tenant's folders first: a refusal says nothing of what exists outside them.
        policy, where = self.config.tenant(record.tenant), f"tenants.{record.tenant}"
        if settings.workdir is not None:  # resolved once: every launch uses what was checked
            user = self.users.get(record.tenant)
            record.spec["workdir"] = checked_workdir(settings.workdir, policy, user, record.tenant)
        if settings.dataset is not None:
            roots, setting = policy.dataset_roots, f"{where}.dataset_roots"
            inside_roots("dataset", settings.dataset, roots, setting)
        if (why := own_ranks(settings) or unstartable(settings, os.environ)) is not None:
            raise SubmitError("command", why)
        if settings.gpus > self.slots:
            fix = (
                "ask for at most that"
                if self.uses_gpus
                else "ask for at most that, or give the daemon more with node.cpu_slots"
                " (STOKER_NODE__CPU_SLOTS)"
            )
            unit = "GPUs" if self.uses_gpus else "CPU training slots"
            raise SubmitError("gpus", f"the node has {self.slots} {unit}; {fix}")
        if settings.gpus > settings.batch_size:  # after the node's count: the first to fix
            raise SubmitError("gpus", f"{settings.gpus} GPUs need a batch_size of at least that")
        pinned = settings.gpu_indices
        if pinned is not None and any(index >= self.slots for index in pinned):
            raise SubmitError("gpu_indices", f"GPUs are numbered 0 to {self.slots - 1}")
        # Everything the core will ask of the job, checked before anything is written:
        # UnknownModel or InvalidRequest name the field.
        self.tpm.rates.job_spec(self.request(record))
        # Only the zoo trainer reads a dataset folder; a command job brings its own data.
        if self.config.agent_mode == "process" and not settings.is_command:
            check_dataset(self.dataset(settings), settings.batch_size)
        continuing.check(
            self.store,
            self.launcher.jobs_dir,
            record,
            simulated=self.simulated(settings),
            exiting=self.scheduler.exiting,
        )
        await self._put(lambda done: SubmitCall(record, done, idempotency))

    async def cancel(self, job_id: str, by: str) -> None:
        await self._put(lambda done: CancelCall(job_id, by, done))

    async def deliver(self, message: AgentMessage) -> None:
        await self._queue.put(FromAgent(message))

    async def add_samples(self, kind: str, rows: list[dict[str, object]], source: str) -> None:
        await self._put(lambda done: SamplesCall(kind, rows, source, done))

    async def refit(self) -> dict[str, Any]:
        """Fit on the stored samples in a thread, then plan with the result; its report.
        SampleError when the samples cannot make a model, ModelRejected when it cannot
        plan this node's jobs."""
        training, loading = self.store.samples("training"), self.store.samples("loading")
        result = await asyncio.to_thread(fit_rows, training, loading)
        await self._put(lambda done: Fitted(result, done))
        return result.report

    async def refit_periodically(self) -> None:
        """Refit every `tpm_refit_s` when new samples came in; errors are logged."""
        while True:
            await asyncio.sleep(self.config.tpm_refit_s)
            if self.tpm.samples_since_fit:
                try:
                    await self.refit()
                except TpmError as error:
                    log.warning("periodic TPM refit skipped: %s", error)

    def state_lost(self) -> str | None:
        """Why the state file can no longer be trusted (deleted or replaced under the
        daemon), said loudly once; None while it is where it was opened."""
        if self._lost is None:
            try:
                self.store.check()
            except StateLost as error:
                self._lost = str(error)
                log.error("state lost: %s", error)
        return self._lost

    async def watch_state(self) -> None:
        """Check the state file every STATE_CHECK_S, so that a loss is said (and /healthz
        fails) even while nobody submits."""
        while self.state_lost() is None:
            await asyncio.sleep(STATE_CHECK_S)

    async def cap_logs_periodically(self) -> None:
        """Keep the logs of unfinished jobs under `job_log_max_bytes` (daemon/logcap.py)."""
        await cap_logs_forever(self.unfinished_job_dirs, self.config.job_log_max_bytes)

    def unfinished_job_dirs(self) -> list[Path]:
        """The folders of jobs whose processes may still write: unfinished jobs, and ended
        ones whose processes run on (a script's work after its final step)."""
        exiting = self.scheduler.exiting
        return [
            self.launcher.jobs_dir / job_id
            for job_id, status in self.scheduler.jobs().items()
            if not status.state.final or job_id in exiting
        ]

    async def _put(self, item: Callable[[asyncio.Future[None]], Item]) -> None:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        await self._queue.put(item(done))
        await done

    # ---- reading ---------------------------------------------------------------------------

    def now(self) -> float:
        return self._clock() - self._started

    def live_job(self, job_id: str) -> LiveJob | None:
        """One job as the core sees it now; None for a job it does not plan (yet)."""
        try:
            return self._live(self.scheduler.status(job_id))
        except UnknownJob:
            return None

    def gpus_held(self, record: JobRecord, live: LiveJob | None) -> list[int]:
        """The GPUs the job holds: while it runs, and after its end while its processes do
        (a completed job adopted after a restart is unknown to the core: its stored placement)."""
        if live is not None and live.holds_gpus:
            return list(live.gpu_indices)
        return list(record.placement) if record.id in self.scheduler.exiting else []

    def length(self, record: JobRecord, live: LiveJob | None) -> int | None:
        """Where the job ends: as the core says now, else as it last said (stored: a job
        that ended before the daemon restarted), else its job file's; None: unsaid."""
        if live is not None and live.total_iterations is not None:
            return live.total_iterations
        if record.total_iterations is not None:
            return record.total_iterations
        return record.settings.iterations

    def script_batch(self, record: JobRecord, live: LiveJob | None) -> int | None:
        """The samples a step of the job's script takes: as the core has it now, else as
        it last had it (stored); None: its script has not said."""
        if live is not None and live.script_batch_size is not None:
            return live.script_batch_size
        return record.script_batch_size

    def _live(self, status: JobStatus) -> LiveJob:
        record = self.records.get(status.id)
        total = status.total_iterations
        running = status.state is JobState.RUNNING
        return LiveJob(
            id=status.id,
            tenant=record.tenant if record is not None else "",
            state=status.state,
            allocation=status.allocation,
            iteration=status.iteration,
            predicted_samples_per_s=status.predicted_samples_per_s,
            measured_samples_per_s=status.measured_samples_per_s,
            restarts=status.restarts,
            gpu_indices=status.gpu_indices,
            heartbeat=self.measured.get(status.id),
            reported=self.reported.get(status.id, {}),
            curve=status.curve,
            pause_cost_s=status.pause_cost_s,
            unmanaged=status.unmanaged,
            exiting=status.exiting,
            total_iterations=total,
            script_batch_size=status.script_batch_size,
            phase=status.phase,
            stalled=status.stalled,
            seconds_left=self.pace.seconds_left(status.id, total) if total and running else None,
        )

    def snapshot(self) -> NodeSnapshot:
        """The node now, for readers (every job the core knows: O(jobs))."""
        jobs = {job_id: self._live(status) for job_id, status in self.scheduler.jobs().items()}
        return NodeSnapshot(
            generation=self.scheduler.generation,
            jobs=jobs,
            waiting_for_gpus=self.scheduler.waiting_for_gpus,
            loader_processes=self.scheduler.loader_processes(),
            cpu_workers=self.node.cpu_workers,
            decoder_capacity=self.config.node.decoder_capacity,
            slots=self.slots,
            uses_gpus=self.uses_gpus,
            policy=self.config.scheduler.policy,
            agent_mode=self.config.agent_mode,
            model_source=self.tpm.source,
            model_report=dict(self.tpm.report),
            model_refused=dict(self.tpm.refused) if self.tpm.refused else None,
            counts=replace(
                self.counters,
                telemetry_samples=self.tpm.telemetry_samples,
                agent_messages_refused=self.link.malformed,
            ),
            warnings=self.warnings,
            contention=self.scheduler.node.contention.points,
            contention_learned=self.scheduler.contention_learned,
            exiting_gpus=self.scheduler.exiting_gpus(),
        )

    def request(self, record: JobRecord) -> JobRequest:
        """The one conversion of a stored job to what the core plans."""
        stored = self.store.job(record.id)
        settings = record.settings
        dataset = settings.dataset or self.config.training.default_dataset
        request = settings.request(
            record.id,
            default_max_restarts=self.config.max_restarts,
            restarts=stored.restarts if stored is not None else 0,
            image_size=zoo_image_size(self.config.training.image_size, dataset),
        )
        # A simulated agent's pauses are the simulated testbed's, not an in-place resize's.
        hot = settings.resize == "hot" and not self.simulated(settings)
        # An earlier daemon's start counts against its time limit (a restored job).
        first = stored.started_at if stored is not None else None
        ran_before = max(0.0, time.time() - first) if first is not None else 0.0
        return replace(request, tenant=record.tenant, hot_resize=hot, ran_before_s=ran_before)

    def simulated(self, settings: JobSettings) -> bool:
        """Whether the job runs as a simulated agent (a zoo job under `agent_mode =
        "simulate"`), not as a real process that trains."""
        return self.config.agent_mode == "simulate" and not settings.is_command

    def queued(self, tenant: str) -> int:
        """`tenant`'s jobs waiting for GPUs (or CPU slots): what max_queued_jobs counts."""
        return sum(
            1
            for job_id in self.scheduler.waiting_for_gpus
            if (record := self.records.get(job_id)) is not None and record.tenant == tenant
        )

    def _over_quota(self, tenant: str) -> QuotaExceeded | None:
        most = self.config.tenant(tenant).max_queued_jobs
        if self.queued(tenant) < most:
            return None
        return QuotaExceeded(
            f"{tenant} has {most} jobs waiting (tenants.{tenant}.max_queued_jobs); submit "
            "again when some have started, or ask the operator for a larger quota"
        )

    def job_user(self, job_id: str) -> UnixUser | None:
        """The unix user a job runs as; None: the daemon's own."""
        record = self.records.get(job_id)
        return self.users.get(record.tenant) if record is not None else None

    def job_user_name(self, job_id: str) -> str | None:
        user = self.job_user(job_id)
        return user.name if user is not None else None

    def dataset(self, settings: JobSettings) -> Path:
        given = settings.dataset or self.config.training.default_dataset
        if given is None:
            raise SubmitError(
                "dataset",
                "give a folder made by `stoker dataset make DIR`, or set "
                "training.default_dataset in the daemon's config",
            )
        return Path(given)

    # ---- the writer ------------------------------------------------------------------------

    async def run(self) -> None:
        """Apply queued items and timer ticks until cancelled."""
        self.restorer.restore()
        while True:
            deadline = self.scheduler.next_deadline()
            wait = _POLL_S if deadline is None else min(_POLL_S, max(0.0, deadline - self.now()))
            # asyncio.timeout, not wait_for: Python 3.11's wait_for returns the item when
            # a cancel and the item arrive together, so a stopping daemon's writer went on
            # (a rare hang at SIGTERM, its stacks caught by bench/daemon_driver.py).
            item = None
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    item = await self._queue.get()
            self.step(item)

    def step(self, item: Item | None) -> None:
        """Apply one item (or none), then let time pass: a tick, and agents that exited.
        The tick waits while items are queued (for `_UNTICKED_MAX` items at most, so that a
        flood cannot hold windows shut): a daemon that was busy reads what its agents said
        meanwhile before it judges their silence, so a message that waited in its own queue
        never makes a job lost."""
        try:
            if item is not None:
                self._apply(item)
            if not self._queue.empty() and self._unticked < _UNTICKED_MAX:
                self._unticked += 1
                return
            self._unticked = 0
            self.feed(Tick())
            self.actions.reap()
            self.actions.pin_cpus()
        except Exception:  # a bug in one item must not stop the daemon
            log.exception("error applying %r", item)
            if not isinstance(item, FromAgent | None) and not item.done.done():
                item.done.set_exception(RuntimeError("internal error; see the daemon log"))

    def _apply(self, item: Item) -> None:
        match item:
            case SubmitCall(record=record, done=done, idempotency=idempotency):
                self._submitted(record, done, idempotency)
            case CancelCall(job_id=job_id, by=by, done=done):
                if job_id in self.scheduler.exiting:  # it ended; its processes run on
                    self.actions.stop_after_end(job_id, by)
                elif not self.restorer.cancel(job_id, by) and job_id in self.records:
                    self.feed(JobCancelled(job_id, by, exited=not self.launcher.running(job_id)))
                _resolve(done)
            case FromAgent(message=message):
                self._from_agent(message)
            case SamplesCall(kind=kind, rows=rows, source=source, done=done):
                self.store.add_samples(kind, rows, time.time(), source)
                self.tpm.samples_since_fit += len(rows)
                _resolve(done)
            case Fitted(result=result, done=done):
                try:
                    self.tpm.use(result, self.scheduler)
                except ModelRejected as error:
                    if not done.done():  # the caller may have gone
                        done.set_exception(error)
                else:
                    _resolve(done)

    def _submitted(
        self,
        record: JobRecord,
        done: asyncio.Future[None],
        idempotency: tuple[str, str] | None,
    ) -> None:
        """Commit a new job, or refuse it: its Idempotency-Key made a job already (Replayed),
        its id is taken (the caller draws another, api.py) or its tenant's queue is full.
        Checked here, by the one writer, so that no two submits race past any of them."""
        refusal: Exception | None = None
        first = self.store.idempotent(record.tenant, idempotency[0]) if idempotency else None
        if first is not None:
            refusal = Replayed(*first)
        elif record.id in self.records or self.store.job(record.id) is not None:
            refusal = IdTaken(record.id)
        else:
            refusal = self._over_quota(record.tenant)
        if refusal is not None:
            if not done.done():
                done.set_exception(refusal)
            return
        self.store.add_job(record, idempotency)  # committed before the reply
        self.records[record.id] = record
        _resolve(done)
        self.feed(JobSubmitted(self.request(record)))

    def new_agent_secret(self, job_id: str) -> str:
        """A secret for the job's next launch, stored before the launch so that a daemon
        restarted meanwhile knows it; the old one no longer counts."""
        secret = secrets.token_urlsafe(24)
        self.store.update_job(job_id, time.time(), agent_secret=secret)
        self.agent_secrets[job_id] = secret
        self._secured.discard(job_id)
        self.link.forget(job_id)  # the old launch's connection no longer answers for it
        return secret

    def launched_by(self, message: AgentMessage) -> bool:
        """Whether `message` comes from a launch of a job this daemon runs: the link then
        answers the job on its connection (a message naming a job it does not know, or
        without its launch's secret, moves no route)."""
        return message.job in self.records and self.authentic(message)

    def authentic(self, message: AgentMessage) -> bool:
        """Whether `message` may speak for its job: it carries the secret of the job's
        launch. With `agent_secrets = "when-sent"`, one that carries none passes too while
        the job's agent has not yet sent the secret (an older SDK sends none). A job
        launched by a daemon that gave no secret is taken at its word. A message without
        the secret never speaks for a job that has no agent: one waiting for its launch."""
        expected = self.agent_secrets.get(message.job, "")
        if message.secret and expected:
            if hmac.compare_digest(message.secret.encode(), expected.encode()):
                self._secured.add(message.job)
                return True
            return False
        if expected:
            lenient = self.config.agent_secrets == "when-sent"
            if not lenient or message.job in self._secured:
                return False
        # Unproved: only for a job whose agent may run (a queued job's `finished` from any
        # process on the socket would complete it unrun; submitted -> completed is legal).
        return self._has_agent(message.job)

    def _has_agent(self, job_id: str) -> bool:
        """Whether the job has, or may have, an agent: one launched and not ended, or one
        a restart is waiting to re-attach."""
        if self.restorer.awaiting(job_id):
            return True
        live = self.live_job(job_id)
        return live is not None and live.state.holds_resources

    def keep_metrics(self, message: MetricsMessage) -> None:
        """What a job's script reported, if the message is its agent's (any time: while
        the daemon stops too, when a pause's checkpoint sends the metrics before it)."""
        if message.job in self.records and self.authentic(message):
            self._keep_metrics(message)

    def _keep_metrics(self, message: MetricsMessage) -> None:
        points = [(point.step, point.values) for point in message.points]
        kept = self.store.reported.add(message.job, points, self._clock())
        if kept.first_drop:  # said once: the job's events, and the log
            limits = self.config.limits
            why = kept.why(limits.max_metric_series_per_job, limits.metrics_per_s)
            self.store.add_event(message.job, time.time(), "metrics_dropped", {"why": why})
            log.warning("job %s: %s", message.job, why)
        newest = self.reported.setdefault(message.job, {})
        for _, values in kept.points:
            newest.update(values)

    def _from_agent(self, message: AgentMessage) -> None:
        if message.job not in self.records:
            self.counters.agent_errors += 1
            log.warning(
                "job %s: message %s for a job this daemon does not run", message.job, message.type
            )
            return
        if not self.authentic(message):  # another process speaking for the job
            self.link.refuse(message.job.encode(), f"{message.type} without the launch's secret")
            return
        if isinstance(message, MetricsMessage):  # data to keep, nothing for the core
            self._keep_metrics(message)
            return
        if isinstance(message, Hello):  # re-attached too: it is spoken to in its version
            self._agent_versions[message.job] = message.v
        if self.restorer.awaiting(message.job):
            self.restorer.reattach(message)
            return
        event = self._event_of(message)
        if event is not None:
            self.feed(event)

    def _event_of(self, message: AgentMessage) -> Event | None:
        """What an agent's message is to the core (a heartbeat is fed by `_heartbeat`)."""
        event: Event | None = None
        match message:
            case Hello():
                event = AgentHello(
                    message.job, message.gen, message.iteration, message.resizable, message.workers
                )
            case HeartbeatMessage(last=True):  # the steps it completed, as it exits: no rates
                event = Heartbeat.last_word(message.job, message.gen, message.iteration)
            case HeartbeatMessage():
                self._heartbeat(message)
            case AliveMessage():
                event = Alive(message.job, message.phase, message.iteration)
            case PausedMessage():
                kept = self.actions.paused(message)  # only a file in the job's own folder
                event = Paused(message.job, message.gen, message.iteration, kept)
            case ResumedMessage():
                self.actions.resumed(message)
                event = Resumed(message.job, message.gen, message.workers, message.gap_s)
            case FinishedMessage():
                self.store.update_job(message.job, time.time(), iteration=message.iteration)
                # Its script may go on (an evaluation, a save): its GPUs wait for its exit.
                event = Finished(message.job, exited=not self.launcher.running(message.job))
            case FailedMessage():
                running = self.launcher.running(message.job)  # it says so before it exits
                event = Failed(message.job, message.error, exited=not running)
        return event

    def _heartbeat(self, message: HeartbeatMessage) -> None:
        """Take a heartbeat's rates and pace, feed it to the core, and keep where the job
        ends as the core then takes it."""
        record = self.records[message.job]
        self.tpm.sample(message, record, self.request(record), self.now())
        busy = message.idle_s + message.step_s
        idle = message.idle_s / busy if busy > 0 else 0.0
        self.measured[message.job] = Measured(
            message.samples_per_s, idle, message.iteration, message.share
        )
        self.pace.saw(message.job, self.now(), message.iteration)
        self.feed(
            Heartbeat(
                message.job,
                message.gen,
                message.iteration,
                message.samples_per_s,
                idle,
                message.workers,
                loader_cost_s=message.loader_s,
                loader_cpu_s=message.loader_cpu_s,
                loader_wait_s=message.loader_wait_s,
                cpu_cost_s=message.cpu_s,
                train_cpu_s=message.train_cpu_s,
                train_wait_s=message.train_wait_s,
                refill_fraction=min(message.refill_s / busy, idle) if busy > 0 else 0.0,
                total_iterations=message.total_iterations,
                batch_samples=message.batch_samples,
            )
        )
        self._keep_said(message.job, (message.total_iterations, message.batch_samples))

    def forget_said(self, job_id: str) -> None:
        """A job that ended says nothing more: what its script last said is stored."""
        self._said.pop(job_id, None)

    def _keep_said(self, job_id: str, said: tuple[int, int]) -> None:
        """Store where the job ends and the samples its steps take, as the core takes them,
        whenever its script's word changes: when it first says, and when its first epoch
        has run whole (a job that ended before the daemon restarted still shows them)."""
        if self._said.get(job_id) == said or not any(said):
            return
        live = self.live_job(job_id)
        if live is None or live.state.final:  # a late one: what it said is stored
            return
        self._said[job_id] = said
        self.store.update_job(
            job_id,
            time.time(),
            total_iterations=live.total_iterations,
            script_batch_size=live.script_batch_size,
        )

    def agent_version(self, job_id: str, default: int) -> int:
        return self._agent_versions.get(job_id, default)

    def feed(self, event: Event) -> None:
        """Hand `event` to the core and carry out its commands: where the core raises part
        way, those of what it had changed still, so that the store never disagrees with it
        (issue 37); then say the jobs whose reported numbers a plan refused."""
        commands: list[Command] = []
        try:
            self.scheduler.handle(event, self.now(), commands)
        except Exception as error:
            self.counters.agent_errors += 1
            expected = isinstance(error, SchedulerError | InvalidRequest | TpmError)
            say = log.warning if expected else log.exception
            say("event %s refused by the scheduler: %s", type(event).__name__, error)
        if self.observer is not None:
            self.observer(event, self.now(), commands)
        self.actions.carry_out_all(commands)
        say_refused(self.scheduler, self.store)

    async def shutdown(self) -> None:
        """Stop accepting; ask every running agent to pause, so that it writes a checkpoint,
        and wait up to `shutdown_grace_s` for them; tell those that paused to leave, and
        wait up to `LEAVE_WAIT_S` for them; stop what is left of their processes, but leave
        commands running without the SDK to run on; mark the stop clean (the next start
        counts no restart for it); close the store."""
        self.accepting = False
        (self.state_dir / URL_FILE).unlink(missing_ok=True)  # no daemon listens there now
        self._keep_queued_metrics()
        paused = await self.actions.pause_all(self.config.shutdown_grace_s)
        await self.actions.let_go(paused, LEAVE_WAIT_S)
        # A command without the SDK has no checkpoint to go on from: stopped, it would
        # start over. It runs on, and the next daemon adopts it (`scheduler/restore.py`).
        unmanaged = self.actions.left_running()
        await asyncio.to_thread(self.launcher.stop_all, 2.0, unmanaged)
        self.store.mark_clean_stop()
        self.link.close()
        self.store.close()
        self._lock.release()

    def _keep_queued_metrics(self) -> None:
        """Keep what agents reported that the writer had not reached when it was stopped
        (the metrics a pause's checkpoint flushes come just before a stop). The rest of the
        queue is dropped: the next daemon learns what it said from each job's folder (its
        markers and newest checkpoint) and from the agents that say hello again."""
        while not self._queue.empty():
            item = self._queue.get_nowait()
            if isinstance(item, FromAgent) and isinstance(item.message, MetricsMessage):
                self.keep_metrics(item.message)


def _resolve(done: asyncio.Future[None]) -> None:
    """Answer a waiting REST call, unless its client went away and cancelled it."""
    if not done.done():
        done.set_result(None)


def new_job_id(name: str) -> str:
    """`name`, cut to 40 characters, and 48 random bits: two jobs of one name collide once
    in about 16 million (24 bits collided within 8,000 submissions, issue 17); a collision
    is caught at the write and the submit draws again."""
    return f"{name[:40]}-{secrets.token_hex(6)}"


def _opened(path: Path, limits: Limits) -> Store:
    """The state database, with what one job may report bounded."""
    store = Store(path)
    store.reported.limit(limits.max_metric_series_per_job, limits.metrics_per_s)
    return store
