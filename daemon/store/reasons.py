"""Why a job is in its state, as its row keeps it (the `jobs.reason` column): typed, as the
core said it, never words (issue 38). One of

- `Moved`: its last state change's `StateReason`, with the `Ending` of an end or of the
  attempt a restart follows, and that restart's count and back-off;
- `StoppedAfterEnd`: its processes, running on after its end, stopped as someone asked
  (`StopReason.ASKED`);
- `FailedAfterEnd`: its work after its final step failed or overran (`AfterEnd`), with the
  daemon's account of the exit (opaque, as `Ending.said` is);
- `Restoring`: a daemon's restart ended it (daemon/restorereasons.py: it cannot come back,
  it finished or ended unseen while no daemon ran, it was cancelled while restoring, or it
  had to start again with no restarts left);
- `Worded`: a reason known in words only: one an older state file's events held (the
  migration to schema 9 keeps their text).

The column holds the record as JSON (`encode`, `decode`), NULL when nothing is said.
`reason_words` hands each record to daemon/wording.py, where every word of it is.
"""

import json
from dataclasses import asdict, dataclass
from typing import Any, ClassVar, assert_never

from daemon.restorereasons import Relaunch, RelaunchCause, RestoreEnd, Restoring
from daemon.wording import after_end_words, moved_words, restoring_words, stopped_words
from scheduler.exits import AfterEnd
from scheduler.messages import (
    Ending,
    EndReason,
    NotRelaunched,
    RelaunchRefusal,
    StateChanged,
    StateReason,
)


@dataclass(frozen=True)
class Moved:
    """A state change that said why: its reason, the ending of an end (or of the attempt a
    restart follows), and a restart's count and back-off."""

    KIND: ClassVar[str] = "state"
    reason: StateReason
    ending: Ending | None = None
    restarts: int = 0
    wait_s: float = 0.0

    @classmethod
    def of(cls, change: StateChanged) -> "Moved | None":
        """What `change` said of why; None: it said nothing."""
        if change.reason is None:
            return None
        return cls(change.reason, change.ending, change.restarts, change.wait_s)


@dataclass(frozen=True)
class StoppedAfterEnd:
    """Its processes, running on after its end, were stopped as `by` asked."""

    KIND: ClassVar[str] = "stopped"
    by: str


@dataclass(frozen=True)
class FailedAfterEnd:
    """Its work after its final step ended as `after` says: `said`, the daemon's account
    of the exit; `since_s`, how long after its final step (None: not known); `limit_s`, the
    `finished_exit_s` then."""

    KIND: ClassVar[str] = "exited"
    after: AfterEnd
    said: str
    since_s: float | None
    limit_s: float


@dataclass(frozen=True)
class Worded:
    """A reason known only in words (a file of schema 8 or older)."""

    KIND: ClassVar[str] = "text"
    text: str


JobReason = Moved | StoppedAfterEnd | FailedAfterEnd | Restoring | Worded


def reason_words(reason: JobReason | None) -> str:
    """The reason as the job's `reason` says it; "" for none."""
    match reason:
        case None:
            return ""
        case Moved():
            return moved_words(reason.reason, reason.ending, reason.restarts, reason.wait_s)
        case StoppedAfterEnd(by=by):
            return stopped_words(by)
        case FailedAfterEnd():
            return after_end_words(reason.after, reason.said, reason.since_s, reason.limit_s)
        case Restoring():
            return restoring_words(reason)
        case Worded(text=text):
            return text
        case _ as unreachable:
            assert_never(unreachable)


def encode(reason: object) -> str | None:
    """The column's JSON of `reason` (a `JobReason` or None); TypeError for anything else."""
    if reason is None:
        return None
    if not isinstance(reason, Moved | StoppedAfterEnd | FailedAfterEnd | Restoring | Worded):
        raise TypeError(f"not a job's reason: {reason!r}")
    return json.dumps({"kind": reason.KIND, **asdict(reason)})


def decode(column: str | None) -> JobReason | None:
    """The reason the column's JSON holds (see `encode`); None for NULL. A row this daemon
    cannot read (written by hand, or damaged) is told as it is, not raised: one bad row must
    not fail a listing of every job."""
    try:
        return _decoded(column)
    except (ValueError, KeyError, TypeError) as error:
        return Worded(f"(a reason this daemon cannot read: {error}; stored: {str(column)[:200]})")


def _decoded(column: str | None) -> JobReason | None:
    if column is None:
        return None
    data: dict[str, Any] = json.loads(column)
    match data.pop("kind"):
        case Moved.KIND:
            ending = data["ending"]
            return Moved(
                StateReason(data["reason"]),
                _ending(ending) if ending is not None else None,
                int(data["restarts"]),
                float(data["wait_s"]),
            )
        case StoppedAfterEnd.KIND:
            return StoppedAfterEnd(str(data["by"]))
        case FailedAfterEnd.KIND:
            since = data["since_s"]
            return FailedAfterEnd(
                AfterEnd(data["after"]),
                str(data["said"]),
                float(since) if since is not None else None,
                float(data["limit_s"]),
            )
        case Restoring.KIND:
            return _restoring(data)
        case Worded.KIND:
            return Worded(str(data["text"]))
        case kind:
            raise ValueError(f"unknown kind of job reason: {kind!r}")


def _restoring(data: dict[str, Any]) -> Restoring:
    relaunch = data["relaunch"]
    return Restoring(
        RestoreEnd(data["end"]),
        Relaunch(RelaunchCause(relaunch["cause"]), str(relaunch["state"])) if relaunch else None,
        str(data["by"]),
        str(data["said"]),
    )


def _ending(data: dict[str, Any]) -> Ending:
    refused = data["not_relaunched"]
    return Ending(
        reason=EndReason(data["reason"]),
        said=str(data["said"]),
        by=data["by"],
        waiting=bool(data["waiting"]),
        seconds=float(data["seconds"]),
        limit_s=float(data["limit_s"]),
        phase=str(data["phase"]),
        not_relaunched=(
            NotRelaunched(
                refusal=RelaunchRefusal(refused["refusal"]),
                started_at=refused["started_at"],
                step=int(refused["step"]),
                failed_at=int(refused["failed_at"]),
            )
            if refused is not None
            else None
        ),
    )
