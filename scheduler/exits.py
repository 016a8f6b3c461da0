"""What a job's exit means, decided from the facts the daemon gathered about it: its exit
code, the marker files its SDK left, the state the core had it in, whether the daemon
stopped it. Pure: no files, no clock. The daemon reads the facts (`ExitFacts`) and feeds
them (`ProcessExited`); the core fills in its own state of the job, asks `classify_exit`
what the exit is and acts as the verdict says (scheduler/processes.py); `after_end` says how
a completed job's work after its final step ended, as the event log keeps it; the daemon
words both (`daemon/exitreason.py`)."""

from dataclasses import dataclass
from enum import Enum, StrEnum, auto

from scheduler.states import JobState


class AfterEnd(StrEnum):
    """How a completed job's work after its final step ended, when not with exit 0."""

    FAILED = "failed"  # its script exited non-zero: its save, its evaluation did not finish
    OVERRAN = "overran"  # still running `finished_exit_s` after its final step: stopped
    STOPPED = "stopped"  # a cancel stopped it: asked for, no failure


class ExitKind(Enum):
    """What a job's exit is to the core."""

    COLD_RESIZE = auto()  # exit 0 after a cold pause: it checkpointed and left, as asked
    ENDED_BEFORE = auto()  # the core had it ended already (or never knew it): only noted
    FINISHED = auto()  # its SDK wrote its final step (the finished marker): its end
    FINISHED_WITHOUT_SDK = auto()  # exit 0 of a process without the SDK: its only word
    ADOPTED_UNMANAGED_ENDED = auto()  # adopted without the SDK: no word, nor an exit code
    ENDED_OUTSIDE_EPOCHS = auto()  # an SDK script's own exit 0 outside `job.epochs(n)`
    FAILED = auto()  # anything else: the job's failure, told by its exit reason


@dataclass(frozen=True)
class ExitFacts:
    """What the daemon knows of one exit of a job's processes."""

    code: int | None  # the exit code; negative: the signal; None: not this daemon's child
    # The job's state in the core (the core fills it in); None: the core does not know it.
    state: JobState | None = None
    unmanaged: bool = False  # the core has it running without the SDK (the core fills it in)
    command: bool = False  # a command job (not the built-in trainer)
    cold_paused: bool = False  # it paused for a cold resize and was to exit
    finished: int | None = None  # the final step its finished marker says, if written
    last_step: int | None = None  # the steps its last-step marker says, if written
    stop_signal: int | None = None  # the stop signal its script caught, as that marker says

    @property
    def signal(self) -> int | None:
        """The signal that killed it, if one did."""
        return -self.code if self.code is not None and self.code < 0 else None


@dataclass(frozen=True)
class ExitVerdict:
    """`classify_exit`'s answer: what the exit is, and what the core is told with it."""

    kind: ExitKind
    final_iteration: int | None = None  # FINISHED: the step it ended at, to store
    last_word: int | None = None  # the steps its agent completed, fed before its end
    stopped_at: int | None = None  # a cancelled job's stop step (its checkpoint's)

    @property
    def noted(self) -> bool:
        """Whether the exit is kept in the job's events (a cold resize's is not)."""
        return self.kind is not ExitKind.COLD_RESIZE


def classify_exit(facts: ExitFacts) -> ExitVerdict:
    """What the exit in `facts` is: its end as its markers and exit code say, for a job
    the core has holding resources; else only noted."""
    state = facts.state
    if state is None or not state.holds_resources:
        # It ended before (the daemon gives its GPUs back once nothing of it runs); a
        # cancelled one's agent said the step it stopped at as it left.
        stopped_at = facts.last_step if state is JobState.CANCELLED else None
        return ExitVerdict(ExitKind.ENDED_BEFORE, stopped_at=stopped_at)
    if facts.code == 0 and facts.cold_paused:
        return ExitVerdict(ExitKind.COLD_RESIZE)
    return _end(facts, state)


def _end(facts: ExitFacts, state: JobState) -> ExitVerdict:
    """The end of a job that held resources, as its markers and exit code say."""
    # It exited before its `finished` was read, and may have failed after it (in its save):
    # `after_end` says so then.
    if facts.finished is not None:
        return ExitVerdict(ExitKind.FINISHED, final_iteration=facts.finished)
    # Without the SDK: run unmanaged, or a command that ended before it said hello.
    without_sdk = facts.unmanaged or (facts.command and state is JobState.STARTING)
    if facts.code == 0 and without_sdk:
        return ExitVerdict(ExitKind.FINISHED_WITHOUT_SDK)
    if facts.code is None and facts.unmanaged:
        return ExitVerdict(ExitKind.ADOPTED_UNMANAGED_ENDED)
    if facts.code == 0 and state is JobState.RUNNING and facts.stop_signal is None:
        # Its script ended by itself, outside `job.epochs(n)`: its end. (In a round, an exit
        # may be a cold resize's whose `paused` is not read yet; after a signal, one that
        # left its loop on `job.should_stop()`: stopped, not done.)
        return ExitVerdict(ExitKind.ENDED_OUTSIDE_EPOCHS, last_word=facts.last_step)
    return ExitVerdict(ExitKind.FAILED, last_word=facts.last_step)


def after_end(
    code: int | None, state: JobState | None, stopped: AfterEnd | None
) -> AfterEnd | None:
    """How a job's exit ended its work after its final step, for a completed job whose
    processes exited non-zero: stopped by a cancel (`stopped` STOPPED), stopped for running
    past `finished_exit_s` (OVERRAN), else failed; None for any other exit."""
    if state is not JobState.COMPLETED or code in (0, None):
        return None
    return stopped or AfterEnd.FAILED
