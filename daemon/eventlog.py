"""The job event log's entries for what the core records (`GET /v1/events`): each record as
(job, kind, data), and the kinds other modules look up by name; reasons in words as
daemon/wording.py says them. Low in the daemon: it imports only the core's message types
and their wording."""

from typing import Any, assert_never

from daemon.wording import (
    curve_refused_words,
    launch_retry_words,
    restart_words,
    state_words,
)
from scheduler.messages import (
    CurveRefused,
    Gated,
    HelloNoted,
    LaunchRetrying,
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
REFUSED_EVENT = "refused"  # a plan refused a job's learned curve: it runs on its prior
EXITED_EVENT = "exited"  # a job's processes exited: their code, and why when that failed it
RETRY_EVENT = "launch_retry"  # the node was short for a job's launch: it is tried again

Logged = tuple[str | None, str, dict[str, Any]]


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


OneJob = (
    StateChanged | Queued | HelloNoted | RanUnmanaged | StaleMessage | Restarting | Stalled
) | (CurveRefused | LaunchRetrying)


def _job_event(record: OneJob) -> Logged:  # noqa: PLR0911 (one return a type)
    """One job's record."""
    match record:
        case StateChanged(job_id=job_id, old=old, new=new):
            data: dict[str, Any] = {"from": old.value if old else "restored", "to": new.value}
            why = state_words(record)
            return job_id, "state", {**data, "why": why} if why else data
        case Queued(job_id=job_id, gpus=gpus):
            return job_id, "submitted", {"gpus": gpus}
        case HelloNoted(job_id=job_id, gen=gen, state=state):
            return job_id, "hello", {"gen": gen, "state": state.value}
        case RanUnmanaged(job_id=job_id, unmanaged=unmanaged):
            return job_id, UNMANAGED_EVENT, {"unmanaged": unmanaged}
        case StaleMessage(job_id=job_id, kind=kind, gen=gen):
            stale: dict[str, Any] = {"message": kind.value}
            return job_id, "stale", stale if gen is None else {**stale, "gen": gen}
        case Restarting(job_id=job_id, restarts=restarts):
            return job_id, "restart", {"restarts": restarts, "why": restart_words(record)}
        case Stalled(job_id=job_id, stalled=stalled, silent_s=silent_s, phase=phase):
            said: dict[str, Any] = {"stalled": stalled, "phase": phase}
            return job_id, "stall", {**said, "silent_s": round(silent_s, 1)} if stalled else said
        case CurveRefused(job_id=job_id):
            return job_id, REFUSED_EVENT, {"why": curve_refused_words(record)}
        case LaunchRetrying(job_id=job_id, tries=tries):
            return job_id, RETRY_EVENT, {"why": launch_retry_words(record), "tries": tries}
        case _ as unreachable:
            assert_never(unreachable)
