"""The words for the core's reasons: why a job ended, why a failed one is not relaunched,
why it moved, why it waits, why its learned curve was refused, why its launch is tried
again, why an ended job's processes were stopped or its work after its end failed, as the
job's `reason` (kept typed on its row: daemon/store/reasons.py), its event log and the
daemon's log say them. The core says why in enums with typed details (scheduler/reasons.py)
and never reads text; this module alone turns them into text, so that a reason reads the
same wherever it shows. Exits and launches are worded where they are read, in
daemon/exitreason.py (their words reach the core as opaque `said` text)."""

from typing import assert_never

from daemon.restorereasons import Relaunch, RelaunchCause, RestoreEnd, Restoring
from scheduler.exits import AfterEnd
from scheduler.messages import (
    CurveRefused,
    Ending,
    EndReason,
    LaunchRetrying,
    NotRelaunched,
    RelaunchRefusal,
    Restarting,
    Stalled,
    StateChanged,
    StateReason,
    Waiting,
    WaitReason,
)

# An SDK script's own exit 0 without `job.epochs(n)` ending: a `for epoch in range(n)` loop,
# or a step-counting one. The job did what it was written to; a relaunch would run it again.
ENDED_OUTSIDE_EPOCHS = (
    "exited with code 0 outside `job.epochs(n)`, so taken as completed at its last step;"
    " loop with `for epoch in job.epochs(n)` to have stoker know its length and resume it"
    " mid-run after a relaunch"
)
# A command without the SDK that an earlier daemon started: this one is not its parent, so
# its exit code is lost with it. Nothing says it failed; its logs say how it ended.
ADOPTED_UNMANAGED_ENDED = (
    "its process ended; started by an earlier daemon and running without the SDK, it left"
    " no exit code this daemon could read (not its parent): taken as completed, its logs say"
    " how it ended"
)
# Nor when it ended before a restarted daemon took it back (while none ran, or while the
# new one waited for it): the new one finds it gone.
ENDED_UNSEEN = (
    "its process, started by an earlier daemon, ended before this one took it back; running"
    " without the SDK, it left no word of how (its exit code reaches only the daemon that"
    " started it): taken as completed, its logs say how it ended (not run again: it has no"
    " checkpoint to go on from)"
)

# What a move that is not an end says, by its reason.
_MOVED = {
    StateReason.RAN_UNMANAGED: (
        "no hello from the SDK: runs unmanaged, its workers fixed, never paused"
    ),
    StateReason.PAUSE_TIMED_OUT: "pause timed out: keeps its allocation",
    StateReason.REATTACHED: "re-attached: its agent outlived the daemon",
    StateReason.REATTACHED_UNMANAGED: (
        "re-attached: it runs without the SDK and outlived the daemon"
    ),
}


def state_words(change: StateChanged) -> str:
    """Why a job moved, as its reason and its `state` event say it; "" where nothing is
    said."""
    if change.reason is None:
        return ""
    return moved_words(change.reason, change.ending, change.restarts, change.wait_s)


def moved_words(reason: StateReason, ending: Ending | None, restarts: int, wait_s: float) -> str:
    """Why a job moved as `reason` says, with the `ending` of an end or of the attempt a
    restart (its `restarts`th, after `wait_s`) follows."""
    if reason is StateReason.ENDED:
        return ending_words(ending) if ending is not None else ""
    if reason is StateReason.RESTARTING:
        failure = ending_words(ending) if ending is not None else ""
        return f"restart {restarts} in {wait_s:g} s: {failure}"
    return _MOVED[reason]


def restoring_words(reason: Restoring) -> str:
    """How a daemon's restart ended a job (daemon/restore.py)."""
    match reason.end:
        case RestoreEnd.UNRESTORABLE:
            return f"cannot be restored: {reason.said}"
        case RestoreEnd.FINISHED_WHILE_DOWN:
            return "finished while the daemon was down"
        case RestoreEnd.ENDED_UNSEEN:
            return ENDED_UNSEEN
        case RestoreEnd.CANCELLED:
            return f"cancelled by {reason.by} while restoring"
        case RestoreEnd.NO_RESTARTS_LEFT:
            assert reason.relaunch is not None
            return f"{relaunch_words(reason.relaunch)}; no restarts left"
        case _ as unreachable:
            assert_never(unreachable)


def relaunch_words(relaunch: Relaunch) -> str:
    """Why a restored job had to start again."""
    match relaunch.cause:
        case RelaunchCause.DAEMON_STOPPED:
            return f"the daemon was stopped while it was {relaunch.state}"
        case RelaunchCause.DAEMON_RESTARTED:
            return f"the daemon restarted while it was {relaunch.state}"
        case RelaunchCause.NO_HELLO:
            return "its agent did not say hello to the restarted daemon"
        case RelaunchCause.CAME_BACK:
            return f"its agent came back {relaunch.state}"
        case _ as unreachable:
            assert_never(unreachable)


def stopped_words(by: str) -> str:
    """An ended job's processes, running on after its end, stopped as `by` asked
    (`StopReason.ASKED`)."""
    return f"its processes, running on after its end, were stopped by {by}"


def after_end_words(after: AfterEnd, failure: str, since_s: float | None, limit_s: float) -> str:
    """Why a completed job's work after its final step ended as `after` says, for its
    exit's event and its reason; "" when it was stopped as asked. `failure`: the daemon's
    account of the exit; `since_s`: how long after its final step it exited, if known;
    `limit_s`: `finished_exit_s`."""
    match after:
        case AfterEnd.STOPPED:  # a cancel of its work after training: stopped, not failed
            return ""
        case AfterEnd.FAILED:
            when = "after it" if since_s is None else f"{since_s:.0f} s after it"
            return f"completed its final step; then, {when}, its script failed: {failure}"
        case AfterEnd.OVERRAN:
            return (
                f"completed its final step; then, still running {limit_s:g} s after it"
                " (finished_exit_s), it was stopped"
            )
        case _ as unreachable:
            assert_never(unreachable)


def restart_words(record: Restarting) -> str:
    """Why a relaunched job's attempt ended, for its `restart` event."""
    return ending_words(record.ending)


def ending_words(ending: Ending) -> str:
    """Why a job ended, as its reason says it: the end itself, whether it was still
    waiting for GPUs, and why a failure is not relaunched."""
    words = _end(ending)
    if ending.waiting:
        words = f"{words} while waiting"
    refused = not_relaunched_words(ending.not_relaunched) if ending.not_relaunched else ""
    if not refused:
        return words
    # Below a stderr tail on a line of its own, not in its last line: layout of text the
    # job's side told, which decides nothing.
    glue = "\n" if "\n" in words else "; "
    return f"{words}{glue}{refused}"


def _end(ending: Ending) -> str:  # noqa: PLR0911 (one return a reason)
    match ending.reason:
        case EndReason.FINISHED:
            return "finished"
        case EndReason.ENDED_OUTSIDE_EPOCHS:
            return ENDED_OUTSIDE_EPOCHS
        case EndReason.UNMANAGED_ENDED:
            return ADOPTED_UNMANAGED_ENDED
        case EndReason.ENDED_UNSEEN:
            return ENDED_UNSEEN
        case EndReason.EXITED | EndReason.LAUNCH_FAILED | EndReason.JOB_SAID:
            return ending.said  # as told where it happened
        case EndReason.LOST | EndReason.STALLED:
            return _silent(ending)
        case EndReason.NO_HELLO:
            return "never said hello"
        case EndReason.CANCELLED:
            return f"cancelled by {ending.by}" if ending.by else "cancelled"
        case EndReason.TIME_LIMIT:
            return (
                f"time limit: it ran {ending.limit_s:g} s (time_limit_s); told to stop as a"
                " cancel is (the SDK checkpoints at its next step), `stoker resume` goes on"
                " from its newest checkpoint"
            )
        case _ as unreachable:
            assert_never(unreachable)


def _silent(ending: Ending) -> str:
    """A job the core failed for its silence: its link's (LOST), or its progress's."""
    if ending.reason is EndReason.LOST:
        return (
            f"lost: its link to the daemon was silent for {ending.seconds:.0f} s"
            f" (heartbeat_timeout_s = {ending.limit_s:g} s), its process hung or gone"
        )
    return (
        f"{_stalled(ending.seconds, ending.phase)}"
        f" (stall_timeout_s = {ending.limit_s:g} s, scheduler.stall_action = fail)"
    )


def _stalled(seconds: float, phase: str) -> str:
    doing = f" in its {phase} phase" if phase else ""
    return f"stalled: no step and no new phase for {seconds:.0f} s{doing}"


def stalled_words(record: Stalled) -> str:
    """A running job reported stalled, for the daemon's log."""
    return _stalled(record.silent_s, record.phase)


def not_relaunched_words(refused: NotRelaunched) -> str:
    """Why a failed job is not relaunched; "" when its policy allows no (more) restarts:
    its failure says enough."""
    match refused.refusal:
        case RelaunchRefusal.NONE_LEFT:
            return ""
        case RelaunchRefusal.UNMANAGED:
            return "not relaunched: without the SDK stoker cannot tell whether it progressed"
        case RelaunchRefusal.BEFORE_FIRST_STEP:
            started = refused.started_at
            since = f" since its relaunch from step {started}" if started else ""
            return f"not relaunched: it failed before its first step{since}"
        case RelaunchRefusal.FAILED_TWICE:
            return f"not relaunched: it failed twice after completing step {refused.step}"
        case RelaunchRefusal.FAILED_AGAIN_BEFORE:
            return (
                f"not relaunched: it failed again before getting past step {refused.failed_at}"
                f" (this time after step {refused.step})"
            )
        case _ as unreachable:
            assert_never(unreachable)


_ROUND_WAITS = {
    WaitReason.ROUND_PAUSES: (
        "waiting for the jobs a plan is moving to pause: planned once they have"
    ),
    WaitReason.PLANNING: "waiting for the plan being made for it and the jobs beside it",
}


def waiting_words(waiting: Waiting | None) -> str | None:
    """What a job that has not started waits for, in words that name the setting (its
    reason while it waits); None: it waits for none of these."""
    if waiting is None:
        return None
    match waiting.reason:
        case WaitReason.GPUS:
            why = (
                f"waiting for {waiting.gpus} free GPU(s) or CPU training slot(s),"
                f" {waiting.ahead} job(s) ahead of it in the queue"
            )
            if waiting.holding:
                why += (
                    f"; job(s) {', '.join(waiting.holding)} ended but keep theirs until their"
                    " processes exit"
                )
            return why
        case WaitReason.ROUND_PAUSES | WaitReason.PLANNING:
            return _ROUND_WAITS[waiting.reason]
        case WaitReason.ARRIVAL_WINDOW:
            return (
                f"waiting for the arrival window: planned in {waiting.seconds_left:.0f} s with"
                " every job that arrives meanwhile"
                f" (scheduler.arrival_window_s = {waiting.setting_s:g} s)"
            )
        case WaitReason.SDK_HELLO:
            return (
                "launched; waiting for the SDK's hello (stoker.init()): a command that does"
                f" not call it is taken to run without it in {waiting.seconds_left:.0f} s"
                f" (scheduler.unmanaged_after_s = {waiting.setting_s:g} s)"
            )
        case WaitReason.HELLO:
            return (
                f"launched; waiting for its agent's hello, at most {waiting.seconds_left:.0f} s"
                f" more (scheduler.launch_timeout_s = {waiting.setting_s:g} s)"
            )
        case _ as unreachable:
            assert_never(unreachable)


def curve_refused_words(refusal: CurveRefused) -> str:
    """Why a plan put a job's learned curve back on its prior (scheduler/guard.py)."""
    return (
        f"its reported numbers were refused ({refusal.raised}: {refusal.raised_said});"
        " planned on its prior"
    )


def launch_retry_words(record: LaunchRetrying) -> str:
    """Why a launch waits: the node was short for it (`said`: the daemon's account)."""
    return f"the daemon could not start it ({record.said}); tried again in {record.pause_s:g} s"


def in_brief(why: str) -> str:
    """A reason for the daemon's log: its first line and, for a failure, its last (where
    a refusal to relaunch is said; the stderr between stays in the job's reason), printable
    characters only (what a script wrote is not the log's to format)."""
    lines = [line for line in why.splitlines() if line.strip()]
    if not lines:
        return ""
    brief = lines[0] if len(lines) == 1 else f"{lines[0]} ... {lines[-1]}"
    return " (" + "".join(c if c.isprintable() else "?" for c in brief)[:300] + ")"
