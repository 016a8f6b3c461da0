"""The daemon's one writer (STYLE.md): REST calls, agent messages and process exits become
items on one asyncio queue; one task turns each into an event for the scheduler core
(`scheduler/`), which decides everything, and carries out the commands it returns.

The service builds its parts and hands each the collaborators it uses (`daemon/parts.py`):
submits are checked at the edge by `daemon/intake.py`, agents' messages taken by
`daemon/agentinput.py`, commands carried out by `daemon/actions.py`, exits reaped by
`daemon/reaping.py`, what an earlier daemon left brought back by `daemon/restore.py`,
readers served by `daemon/views.py`, the way out is `daemon/shutdown.py`.

Readers never touch this object's insides: they read `snapshot()` and the store.
"""

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, assert_never

from agents.protocol import AgentMessage, MetricsMessage
from allocator import InvalidRequest, ThroughputModel
from daemon import intake
from daemon.actions import Actions
from daemon.agentinput import AgentInput
from daemon.agentkeys import AgentKeys
from daemon.agentlink import AgentLink
from daemon.config import DaemonConfig
from daemon.items import (
    CancelCall,
    Fitted,
    FromAgent,
    Item,
    PlanDone,
    SamplesCall,
    SubmitCall,
    resolve,
)
from daemon.jobbook import JobBook
from daemon.launcher import Launcher
from daemon.learning import fit_rows
from daemon.logcap import cap_logs_forever
from daemon.metrics import Metrics
from daemon.parts import Parts
from daemon.planner import Planner
from daemon.reaping import Reaper
from daemon.restore import Restorer
from daemon.shutdown import leave
from daemon.snapshot import Counts, LiveJob, NodeSnapshot
from daemon.statelock import URL_FILE
from daemon.store import JobRecord, StateLost
from daemon.tenants import closed_parents, user_warnings
from daemon.tpmkeeper import ModelRejected
from daemon.views import Views
from daemon.wiring import build_core, open_state_dir
from scheduler.errors import SchedulerError
from scheduler.messages import (
    Command,
    Event,
    HelloMissed,
    JobCancelled,
    ModelRefitted,
    PlanAbandoned,
    PlanMade,
    PlanNeeded,
    StopRequested,
    Tick,
)
from tpm import TpmError

log = logging.getLogger(__name__)

_POLL_S = 0.2  # agent exits are noticed at least this often
_UNTICKED_MAX = 1000  # queued items applied before time is let pass, at most
STATE_CHECK_S = 5.0  # the state file is checked for being deleted or replaced this often


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
        plan_off_loop: bool = False,
    ) -> None:
        """`plan_off_loop`: the core's plans are made while the queue flows (the
        daemon's); else at once, as the simulator makes them (daemon/planner.py)."""
        self.config = config
        self._clock = clock
        self._started = clock()
        opened = open_state_dir(config)
        self.state_dir, self._lock, self.users = opened.path, opened.lock, opened.users
        self.store = opened.store
        self.jobs = JobBook(config, self.store, self.users)
        self.records = self.jobs.records  # every job this daemon runs or ran
        self.link = AgentLink(
            self.state_dir / "agents.sock",
            list(self.users.values()),
            self.jobs.job_user_name,
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
        self.node, self.tpm, self.scheduler = build_core(config, self.store, model)
        self.uses_gpus, self.slots = self.node.uses_gpus, self.node.slots
        self.counters = Counts()
        self.metrics = Metrics()
        self.keys = AgentKeys(config, self.store, self.link, self._has_agent)
        self.parts = Parts(
            config=config,
            store=self.store,
            launcher=self.launcher,
            scheduler=self.scheduler,
            link=self.link,
            node=self.node,
            tpm=self.tpm,
            counters=self.counters,
            metrics=self.metrics,
            jobs=self.jobs,
            keys=self.keys,
            decoder_endpoint=self.decoder_endpoint,
            now=self.now,
            feed=self.feed,
        )
        self.views = Views(self.parts, self.warnings)
        self.metrics.watch(self.snapshot)
        self.actions = Actions(self.parts)
        self.reaper = Reaper(self.parts)
        self.restorer = Restorer(self.parts, self.actions)
        self.agents = AgentInput(self.parts, self.actions, self.restorer, clock)
        self.observer: Observer | None = None
        self.accepting = True
        self._queue: asyncio.Queue[Item] = asyncio.Queue()
        self.planner = Planner(
            self._queue.put_nowait, self.feed, self.metrics, off_loop=plan_off_loop
        )
        self._unticked = 0  # items applied since the writer last let time pass (`step`)
        self._lost: str | None = None  # why the state file can no longer be trusted

    # ---- called from REST handlers (same event loop) -------------------------------------

    async def submit(self, record: JobRecord, idempotency: tuple[str, str] | None = None) -> None:
        """Queue a new job; returns once it is committed to the store. `idempotency`: the
        submit's (Idempotency-Key, body digest); Replayed if the key made a job before."""
        intake.check(self.parts, self.users, record)
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
        await cap_logs_forever(self.views.writing_job_dirs, self.config.job_log_max_bytes)

    async def _put(self, item: Callable[[asyncio.Future[None]], Item]) -> None:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        await self._queue.put(item(done))
        await done

    # ---- reading (daemon/views.py) ---------------------------------------------------------

    def now(self) -> float:
        return self._clock() - self._started

    def live_job(self, job_id: str) -> LiveJob | None:
        return self.views.live_job(job_id)

    def snapshot(self) -> NodeSnapshot:
        return self.views.snapshot()

    # ---- agents (daemon/agentkeys.py, daemon/agentinput.py) --------------------------------

    @property
    def agent_secrets(self) -> dict[str, str]:
        """job -> the secret of its current launch."""
        return self.keys.secrets

    def launched_by(self, message: AgentMessage) -> bool:
        """Whether `message` comes from a launch of a job this daemon runs: the link then
        answers the job on its connection (a message naming a job it does not know, or
        without its launch's secret, moves no route)."""
        return message.job in self.records and self.authentic(message)

    def authentic(self, message: AgentMessage) -> bool:
        return self.keys.authentic(message)

    def _has_agent(self, job_id: str) -> bool:
        """Whether the job has, or may have, an agent: one launched and not ended, or one
        a restart is waiting to re-attach."""
        if self.restorer.awaiting(job_id):
            return True
        live = self.live_job(job_id)
        return live is not None and live.state.holds_resources

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
            self.reaper.exits()
            self.reaper.free_exited()
            self.actions.pin_cpus()
        except Exception:  # a bug in one item must not stop the daemon
            log.exception("error applying %r", item)
            if not isinstance(item, FromAgent | PlanDone | None) and not item.done.done():
                item.done.set_exception(RuntimeError("internal error; see the daemon log"))

    def _apply(self, item: Item) -> None:
        match item:
            case SubmitCall(record=record, done=done, idempotency=idempotency):
                intake.commit(self.parts, record, done, idempotency)
            case CancelCall(job_id=job_id, by=by, done=done):
                self._cancel(job_id, by)
                resolve(done)
            case FromAgent(message=message):
                self.agents.take(message)
            case SamplesCall(kind=kind, rows=rows, source=source, done=done):
                self.store.add_samples(kind, rows, time.time(), source)
                self.tpm.samples_since_fit += len(rows)
                resolve(done)
            case Fitted():
                self._fitted(item)
            case PlanDone(ticket=ticket, outcome=outcome):
                self.feed(PlanMade(ticket, outcome))
            case _ as unreachable:
                assert_never(unreachable)

    def _cancel(self, job_id: str, by: str) -> None:
        if job_id in self.scheduler.exiting:  # it ended; its processes run on
            self.feed(StopRequested(job_id, by))  # stopped: its GPUs go to the next job
            self.reaper.free_exited()
        elif not self.restorer.cancel(job_id, by) and job_id in self.records:
            self.feed(JobCancelled(job_id, by, exited=not self.launcher.running(job_id)))

    def _fitted(self, item: Fitted) -> None:
        try:
            self.tpm.use(item.result, self.feed)
        except ModelRejected as error:
            if not item.done.done():  # the caller may have gone
                item.done.set_exception(error)
        else:
            resolve(item.done)

    def feed(self, event: Event) -> Exception | None:
        """Hand `event` to the core and carry out its commands: where the core raises part
        way, those of what it had changed still, so that the store never disagrees with it
        (issue 37). The core's
        refusal, None where it took the event (a refit's is said by the model keeper)."""
        commands: list[Command] = []
        refusal: Exception | None = None
        try:
            self.scheduler.handle(event, self.now(), commands)
        except Exception as error:
            refusal = error
            _say_refused(self.counters, event, error)
        if self.observer is not None:
            self.observer(event, self.now(), commands)
        self.actions.carry_out_all(commands)
        for command in commands:  # the restorer's and the planner's, after the rest
            if isinstance(command, HelloMissed):
                self._hello_missed(command)
            elif isinstance(command, PlanNeeded):
                self.planner.make(command)
            elif isinstance(command, PlanAbandoned):
                self.planner.abandon(command)
        return refusal

    def _hello_missed(self, command: HelloMissed) -> None:
        try:
            self.restorer.hello_missed(command.job_id)
        except Exception:  # one job's problem must not keep the core's other commands out
            log.exception("carrying out %r", command)

    async def shutdown(self) -> None:
        """Stop accepting; ask every running agent to pause, so that it writes a checkpoint,
        and wait up to `shutdown_grace_s` for them; tell those that paused to leave, and
        wait a while for them; stop what is left of their processes, but leave commands
        running without the SDK to run on (`daemon/shutdown.py`); mark the stop clean (the
        next start counts no restart for it); close the store."""
        self.accepting = False
        self.planner.close()
        (self.state_dir / URL_FILE).unlink(missing_ok=True)  # no daemon listens there now
        self._keep_queued_metrics()
        await leave(self.parts, self.actions, self.agents)
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
                self.agents.keep_metrics(item.message)


def _say_refused(counters: Counts, event: Event, error: Exception) -> None:
    """Count and log the core's refusal of `event`; a refit's the model keeper says."""
    if isinstance(event, ModelRefitted):
        return
    counters.agent_errors += 1
    expected = isinstance(error, SchedulerError | InvalidRequest | TpmError)
    say = log.warning if expected else log.exception
    say("event %s refused by the scheduler: %s", type(event).__name__, error)
