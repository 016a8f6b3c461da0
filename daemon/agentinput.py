"""What agents say, turned into the core's events: each message checked (a job this daemon
runs, its launch's secret), then taken as what it is. A heartbeat's rates go to the
throughput model, its pace to the views; reported metrics are kept, not fed; a restored
job's first word goes to the restorer."""

import logging
import time
from collections.abc import Callable

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
from daemon.actions import Actions
from daemon.parts import Parts
from daemon.restore import Restorer
from daemon.snapshot import Measured
from scheduler.errors import UnknownJob
from scheduler.messages import (
    AgentHello,
    Alive,
    EndReason,
    Event,
    Failed,
    Finished,
    Heartbeat,
    Paused,
    Resumed,
)

log = logging.getLogger(__name__)


class AgentInput:
    def __init__(
        self, parts: Parts, actions: Actions, restorer: Restorer, clock: Callable[[], float]
    ) -> None:
        self._parts = parts
        self._actions = actions
        self._restorer = restorer
        self._clock = clock  # the service's own clock: reported metrics' rate limit

    def take(self, message: AgentMessage) -> None:
        """One message from the link, applied by the writer."""
        parts = self._parts
        if message.job not in parts.jobs.records:
            parts.counters.agent_errors += 1
            log.warning(
                "job %s: message %s for a job this daemon does not run", message.job, message.type
            )
            return
        if not parts.keys.authentic(message):  # another process speaking for the job
            parts.link.refuse(message.job.encode(), f"{message.type} without the launch's secret")
            return
        if isinstance(message, MetricsMessage):  # data to keep, nothing for the core
            self._keep_metrics(message)
            return
        if isinstance(message, Hello):  # re-attached too: it is spoken to in its version
            parts.keys.spoke(message)
        if self._restorer.awaiting(message.job):
            self._restorer.reattach(message)
            return
        event = self._event_of(message)
        if event is not None:
            parts.feed(event)

    def keep_metrics(self, message: MetricsMessage) -> None:
        """What a job's script reported, if the message is its agent's (any time: while
        the daemon stops too, when a pause's checkpoint sends the metrics before it)."""
        if message.job in self._parts.jobs.records and self._parts.keys.authentic(message):
            self._keep_metrics(message)

    def _keep_metrics(self, message: MetricsMessage) -> None:
        parts = self._parts
        points = [(point.step, point.values) for point in message.points]
        kept = parts.store.reported.add(message.job, points, self._clock())
        if kept.first_drop:  # said once: the job's events, and the log
            limits = parts.config.limits
            why = kept.why(limits.max_metric_series_per_job, limits.metrics_per_s)
            parts.store.add_event(message.job, time.time(), "metrics_dropped", {"why": why})
            log.warning("job %s: %s", message.job, why)
        newest = parts.held.reported.setdefault(message.job, {})
        for _, values in kept.points:
            newest.update(values)

    def _event_of(self, message: AgentMessage) -> Event | None:
        """What an agent's message is to the core (a heartbeat is fed by `_heartbeat`)."""
        parts = self._parts
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
                kept = self._actions.keep_checkpoint(message)  # only one in its own folder
                cold_at = self._actions.cold_paused_at(message)
                event = Paused(message.job, message.gen, message.iteration, kept, cold_at)
            case ResumedMessage():
                self._actions.resumed(message)
                event = Resumed(message.job, message.gen, message.workers, message.gap_s)
            case FinishedMessage():
                parts.store.update_job(message.job, time.time(), iteration=message.iteration)
                # Its script may go on (an evaluation, a save): its GPUs wait for its exit.
                event = Finished(message.job, exited=not parts.launcher.running(message.job))
            case FailedMessage():
                running = parts.launcher.running(message.job)  # it says so before it exits
                # What the job said of its failure: opaque, carried into its reason.
                event = Failed(
                    message.job, message.error, exited=not running, cause=EndReason.JOB_SAID
                )
        return event

    def _heartbeat(self, message: HeartbeatMessage) -> None:
        """Take a heartbeat's rates and pace, feed it to the core, and keep where the job
        ends as the core then takes it."""
        parts, held = self._parts, self._parts.held
        record = parts.jobs.records[message.job]
        parts.tpm.sample(message, record, parts.jobs.request(record), parts.now())
        busy = message.idle_s + message.step_s
        idle = message.idle_s / busy if busy > 0 else 0.0
        held.measured[message.job] = Measured(
            message.samples_per_s, idle, message.iteration, message.share
        )
        held.pace.saw(message.job, parts.now(), message.iteration)
        parts.feed(
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

    def _keep_said(self, job_id: str, said: tuple[int, int]) -> None:
        """Store where the job ends and the samples its steps take, as the core takes them,
        whenever its script's word changes: when it first says, and when its first epoch
        has run whole (a job that ended before the daemon restarted still shows them)."""
        parts = self._parts
        if parts.held.said.get(job_id) == said or not any(said):
            return
        try:
            status = parts.scheduler.status(job_id)
        except UnknownJob:
            return
        if status.state.final:  # a late one: what it said is stored
            return
        parts.held.said[job_id] = said
        parts.store.update_job(
            job_id,
            time.time(),
            total_iterations=status.total_iterations,
            script_batch_size=status.script_batch_size,
        )
