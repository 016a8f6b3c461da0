"""The scheduler core's mutable state in one object: the job tables, the arrival and
completion buffers, the open round, the generation, admission, and what the core learned of
the node (its contention, the pauses measured on it). The concerns (scheduler/lifecycle.py,
reports.py, timers.py, rounds.py, learning.py, reattach.py) are functions over it; only
`Scheduler.handle` (scheduler/scheduler.py) calls them, so one event at a time changes it.
Here also the two moves every concern makes: finding a job, and moving it along the
transition table with the bookkeeping each state asks for."""

from collections import deque

from allocator import NodeSpec
from scheduler.admission import Admission, GpuPool
from scheduler.commands import Command, StateChanged
from scheduler.config import SchedulerConfig
from scheduler.errors import UnknownJob
from scheduler.jobs import Job, PendingPlan, ProcessWatch, Round, holding, workers_of
from scheduler.rates import RateModel
from scheduler.reasons import Ending, StateReason
from scheduler.states import JobState, check_transition
from tpm.joint import LoaderTiming

# Loader timings kept for the node's contention (tpm/joint.py): minutes of a full node's
# heartbeats, so that the loads the jobs ran at a while ago still count.
TIMINGS_KEPT = 5000
PAUSES_KEPT = 20  # measured pauses of each kind, for the jobs not paused yet


class Core:
    """The tables the core's decisions read and change; no decision of its own."""

    def __init__(
        self,
        node: NodeSpec,
        rates: RateModel,
        config: SchedulerConfig,
        gpus: GpuPool | None,
    ) -> None:
        self.node = node
        self.admission = Admission(gpus) if gpus is not None else None
        self.rates = rates
        self.config = config
        self.jobs: dict[str, Job] = {}  # every job ever submitted, for status
        self.live: dict[str, Job] = {}  # those not in a final state, in submission order
        # Those whose silence times out (starting or running): a tick looks at these only,
        # not at every job queued behind them.
        self.watched: dict[str, Job] = {}
        self.arrivals: list[str] = []
        self.arrivals_due: float | None = None
        self.backing_off: dict[str, float] = {}  # failed job -> when it may be relaunched
        self.completions_due: float | None = None
        # A window closed while every job the round would plan was still starting or
        # resuming: the round waits for them to run, until this time
        # (`rounds.maybe_start_round`).
        self.held_until: float | None = None
        self.round: Round | None = None
        self.generation = 0
        # The plan asked for and not yet made (scheduler/planning.py): no round starts or
        # ends meanwhile; the events between keep flowing.
        self.planning: PendingPlan | None = None
        self.plan_tickets = 0
        # `rounds.start_beside_running`'s last try that failed: the arrivals and the room.
        self.tried_beside: tuple[tuple[str, ...], int] | None = None
        # The node's contention as configured (or fitted from profiles), and the loader
        # timings of jobs running together that relearn it (`learning.relearn_contention`).
        self.prior_contention = node.contention
        self.timings: deque[LoaderTiming] = deque(maxlen=TIMINGS_KEPT)
        self.timings_new = False
        self.contention_learned = False
        # The pauses measured on this node, the newest `PAUSES_KEPT` of each kind (a job that
        # resizes in place, or not): a job's pause cost until it has paused itself.
        self.pauses: dict[bool, deque[float]] = {
            hot: deque(maxlen=PAUSES_KEPT) for hot in (True, False)
        }
        # Jobs whose loaders are starting, stopping or stopped while they hold processes:
        # while there are any, the node's load is not what the plan counts.
        self.unsettled: set[str] = set()
        # Jobs that ended while their processes may run on (`exited` False on `Finished`,
        # `Failed` or `JobCancelled`; a job lost on its heartbeats; one held since a
        # restart): their GPUs stay placed until they have `Exited`.
        self.exiting: set[str] = set()
        # Ended jobs whose processes may run on, until they exit: when they are stopped
        # (scheduler/watches.py), and what their exit needs to know (scheduler/processes.py).
        self.processes: dict[str, ProcessWatch] = {}
        # Jobs `Restored` for their agent's hello after a daemon's restart, until they are
        # `Reattached` or `Released`: when their hello is due (None once `HelloMissed`).
        self.restored: dict[str, float | None] = {}

    def job(self, job_id: str) -> Job:
        try:
            return self.jobs[job_id]
        except KeyError:
            raise UnknownJob(job_id) from None

    def move(
        self,
        job: Job,
        new: JobState,
        out: list[Command],
        reason: StateReason | None = None,
        *,
        ending: Ending | None = None,
        wait_s: float = 0.0,
    ) -> None:
        """Move `job` to `new` (the transition table refuses an illegal move) and record it,
        with why (`reason`; `ending` for an end or a restart, `wait_s` a restart's back-off)."""
        check_transition(job.request.id, job.state, new)
        restarts = job.restarts if reason is StateReason.RESTARTING else 0
        changed = StateChanged(
            job.request.id, job.state, new, reason, job.iteration, ending, restarts, wait_s
        )
        out.append(changed)
        if new is JobState.RUNNING and job.state is not JobState.RUNNING:
            job.warming = True  # a start or a resume: the next heartbeat times its loaders' start
        job.state = new
        # A launch waiting to be tried again is the starting job's only: one that moves on
        # (cancelled, lost, running after all) forgets it, and a new launch counts afresh.
        job.launch_retry = None
        if new is JobState.STARTING:
            job.launch_tries = 0
        if new.holds_resources and new is not JobState.RUNNING:
            self.unsettled.add(job.request.id)
        else:
            self.unsettled.discard(job.request.id)
        if new in (JobState.STARTING, JobState.RUNNING):
            self.watched[job.request.id] = job
        else:
            self.watched.pop(job.request.id, None)
        if new.final:
            del self.live[job.request.id]
            if self.admission is not None and job.request.id not in self.exiting:
                self.admission.release(job.request.id)

    def loader_processes(self) -> int:
        """Loader processes the jobs holding resources have now (or are about to have):
        workers per GPU times GPUs, the count the plan's capacity is checked against."""
        return sum(
            job.request.gpus * workers_of(holding(job))
            for job in self.live.values()
            if job.state.holds_resources
        )
