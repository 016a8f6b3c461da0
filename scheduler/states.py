"""Job states and the one table of legal transitions between them."""

from enum import StrEnum
from types import MappingProxyType

from scheduler.errors import IllegalTransition


class JobState(StrEnum):
    """Where a job is in its life. The last three are final."""

    SUBMITTED = "submitted"  # accepted, waiting in the arrival buffer
    PENDING = "pending"  # planned, waiting for its launch (others still pausing)
    STARTING = "starting"  # launched, waiting for its agent's hello
    RUNNING = "running"
    PAUSING = "pausing"  # told to pause, waiting for `paused`
    PAUSED = "paused"  # stopped at an iteration boundary, waiting for `resume`
    RESUMING = "resuming"  # told to resume, waiting for `resumed`
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def final(self) -> bool:
        """No transition leaves a final state."""
        return self in FINAL_STATES

    @property
    def holds_resources(self) -> bool:
        """Whether the job's loader workers count against the node now or soon."""
        return self in _HOLDING


FINAL_STATES = frozenset({JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED})
_HOLDING = frozenset(
    {JobState.STARTING, JobState.RUNNING, JobState.PAUSING, JobState.PAUSED, JobState.RESUMING}
)

_S = JobState
# Edges marked "restore" are taken only by a daemon bringing back what an earlier one left:
# its agent's finished marker says the job completed while no daemon listened; the job
# cannot be planned any more (its model left the zoo) or has no restarts left; or it goes
# back to the queue to be relaunched.
TRANSITIONS = MappingProxyType(
    {
        # the arrival window closed and the job has a plan; or the user gave up; restore
        _S.SUBMITTED: frozenset({_S.PENDING, _S.CANCELLED, _S.COMPLETED, _S.FAILED}),
        # launched with its allocation; cancelled before it ever ran; restore
        _S.PENDING: frozenset({_S.STARTING, _S.CANCELLED, _S.SUBMITTED, _S.COMPLETED, _S.FAILED}),
        # its agent said hello; it never came up; cancelled while starting; its agent died
        # and its restart policy relaunches it (from here on, every holding state has that);
        # restore
        _S.STARTING: frozenset({_S.RUNNING, _S.FAILED, _S.CANCELLED, _S.SUBMITTED, _S.COMPLETED}),
        # a new plan changes it; it ended on its own; it died; the user cancelled it; a
        # straggler whose late `paused` arrives after its round gave up is told to resume
        _S.RUNNING: frozenset(
            {_S.PAUSING, _S.COMPLETED, _S.FAILED, _S.CANCELLED, _S.RESUMING, _S.SUBMITTED}
        ),
        # it paused; it finished its last iteration first; a straggler past the pause timeout
        # keeps running with its old allocation; it died; cancelled
        _S.PAUSING: frozenset(
            {_S.PAUSED, _S.COMPLETED, _S.RUNNING, _S.FAILED, _S.CANCELLED, _S.SUBMITTED}
        ),
        # told to resume with its new allocation; died while paused; cancelled; restore
        _S.PAUSED: frozenset({_S.RESUMING, _S.FAILED, _S.CANCELLED, _S.SUBMITTED, _S.COMPLETED}),
        # resumed; finished right after resuming; died on the way; cancelled
        _S.RESUMING: frozenset({_S.RUNNING, _S.COMPLETED, _S.FAILED, _S.CANCELLED, _S.SUBMITTED}),
        _S.COMPLETED: frozenset(),
        _S.FAILED: frozenset(),
        _S.CANCELLED: frozenset(),
    }
)


def check_transition(job_id: str, current: JobState, new: JobState) -> None:
    """Raise IllegalTransition unless the table allows current -> new."""
    if new not in TRANSITIONS[current]:
        raise IllegalTransition(job_id, current.value, new.value)
