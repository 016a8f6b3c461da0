"""Why a daemon's restart moved a job, where the move is the daemon's own (daemon/restore.py
reads what an earlier daemon left: its files, its processes): typed as the core's reasons
are (scheduler/reasons.py), worded in daemon/wording.py, kept on the job's row
(daemon/store/reasons.py)."""

from dataclasses import dataclass
from enum import StrEnum
from typing import ClassVar


class RelaunchCause(StrEnum):
    """Why a restored job had to start again (from its checkpoint)."""

    DAEMON_STOPPED = "daemon_stopped"  # the last daemon stopped cleanly while it ran
    DAEMON_RESTARTED = "daemon_restarted"  # the last daemon died while it ran
    NO_HELLO = "no_hello"  # its agent did not say hello to the restarted daemon
    CAME_BACK = "came_back"  # its agent came back in a state it cannot go on from


@dataclass(frozen=True)
class Relaunch:
    """Why it started again: `state`, the one it was in (DAEMON_*) or the one its agent
    said (CAME_BACK)."""

    cause: RelaunchCause
    state: str = ""


class RestoreEnd(StrEnum):
    """How a restart ended a job."""

    UNRESTORABLE = "unrestorable"  # it cannot come back: `said`, the error (opaque)
    FINISHED_WHILE_DOWN = "finished_while_down"  # its final step came with no daemon
    ENDED_UNSEEN = "ended_unseen"  # a command without the SDK, gone before it was taken back
    CANCELLED = "cancelled"  # `by` a tenant, while it waited for its agent's hello
    NO_RESTARTS_LEFT = "no_restarts_left"  # it had to start again (`relaunch`): none left


@dataclass(frozen=True)
class Restoring:
    """A restart's end of a job, with what its words need."""

    KIND: ClassVar[str] = "restore"
    end: RestoreEnd
    relaunch: Relaunch | None = None
    by: str = ""
    said: str = ""
