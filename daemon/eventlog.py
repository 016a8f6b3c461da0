"""The job event log's words for what the core records (`GET /v1/events`): each record as
(job, kind, data), the kinds other modules look up by name, and a reason in brief for the
daemon's own log. Low in the daemon: it imports only the core's message types."""

from typing import Any, assert_never

from scheduler.messages import (
    Gated,
    HelloNoted,
    Planned,
    Queued,
    RanUnmanaged,
    Record,
    Replanned,
    Restarting,
    StaleMessage,
    Stalled,
    StateChanged,
)

UNMANAGED_EVENT = "unmanaged"  # the kind of event that says a job runs without the SDK
EXITED_EVENT = "exited"  # a job's processes exited: their code, and why when that failed it

Logged = tuple[str | None, str, dict[str, Any]]


def in_brief(why: str) -> str:
    """A reason for the daemon's log: its first line and, for a failure, its last (where
    a refusal to relaunch is said; the stderr between stays in the job's reason), printable
    characters only (what a script wrote is not the log's to format)."""
    lines = [line for line in why.splitlines() if line.strip()]
    if not lines:
        return ""
    brief = lines[0] if len(lines) == 1 else f"{lines[0]} ... {lines[-1]}"
    return " (" + "".join(c if c.isprintable() else "?" for c in brief)[:300] + ")"


def event_of(record: Record) -> Logged:
    """(job, kind, data) of a record as the event log keeps it (`GET /v1/events`)."""
    if isinstance(record, Planned | Gated | Replanned):
        return _plan_event(record)
    return _job_event(record)


def _plan_event(record: Planned | Gated | Replanned) -> Logged:
    """A plan's record: no job's own."""
    match record:
        case Planned(gen=gen, plan=plan):
            return None, "plan", {"gen": gen, **plan.to_dict()}
        case Gated(gen=gen, verdicts=verdicts):
            return None, "gate", {"gen": gen, **{job: str(v) for job, v in verdicts.items()}}
        case Replanned(gen=gen, plan=plan):
            return None, "replan", {"gen": gen, **plan.to_dict()}
        case _ as unreachable:
            assert_never(unreachable)


OneJob = StateChanged | Queued | HelloNoted | RanUnmanaged | StaleMessage | Restarting | Stalled


def _job_event(record: OneJob) -> Logged:  # noqa: PLR0911 (one return a type)
    """One job's record."""
    match record:
        case StateChanged(job_id=job_id, old=old, new=new, why=why):
            data: dict[str, Any] = {"from": old.value if old else "restored", "to": new.value}
            return job_id, "state", {**data, "why": why} if why else data
        case Queued(job_id=job_id, gpus=gpus):
            return job_id, "submitted", {"gpus": gpus}
        case HelloNoted(job_id=job_id, gen=gen, state=state):
            return job_id, "hello", {"gen": gen, "state": state.value}
        case RanUnmanaged(job_id=job_id, unmanaged=unmanaged):
            return job_id, UNMANAGED_EVENT, {"unmanaged": unmanaged}
        case StaleMessage(job_id=job_id, message=message, gen=gen):
            stale: dict[str, Any] = {"message": message}
            return job_id, "stale", stale if gen is None else {**stale, "gen": gen}
        case Restarting(job_id=job_id, restarts=restarts, why=why):
            return job_id, "restart", {"restarts": restarts, "why": why}
        case Stalled(job_id=job_id, stalled=stalled, silent_s=silent_s, phase=phase):
            said: dict[str, Any] = {"stalled": stalled, "phase": phase}
            return job_id, "stall", {**said, "silent_s": round(silent_s, 1)} if stalled else said
        case _ as unreachable:
            assert_never(unreachable)
