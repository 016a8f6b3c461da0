"""The words the daemon gives the core's reasons (daemon/wording.py): what a job's `reason`,
its event log and the daemon's log say, byte for byte as before the reasons were typed."""

import pytest

from daemon.eventlog import event_of
from daemon.wording import (
    curve_refused_words,
    ending_words,
    in_brief,
    state_words,
    waiting_words,
)
from scheduler.messages import (
    CurveRefused,
    Ending,
    EndReason,
    MessageKind,
    NotRelaunched,
    RelaunchRefusal,
    Restarting,
    StaleMessage,
    StateChanged,
    StateReason,
    Waiting,
    WaitReason,
)
from scheduler.states import JobState

NONE_LEFT = NotRelaunched(RelaunchRefusal.NONE_LEFT)


def ended(ending: Ending, new: JobState = JobState.FAILED) -> str:
    return state_words(StateChanged("a", JobState.RUNNING, new, StateReason.ENDED, 0, ending))


def test_a_cancel_says_who_and_whether_it_still_waited() -> None:
    assert ended(Ending(EndReason.CANCELLED)) == "cancelled"
    assert ended(Ending(EndReason.CANCELLED, waiting=True)) == "cancelled while waiting"
    said = ended(Ending(EndReason.CANCELLED, by="alice", waiting=True))
    assert said == "cancelled by alice while waiting"


def test_a_time_limit_says_the_limit_and_how_to_go_on() -> None:
    assert ended(Ending(EndReason.TIME_LIMIT, limit_s=60.0)) == (
        "time limit: it ran 60 s (time_limit_s); told to stop as a cancel is (the SDK"
        " checkpoints at its next step), `stoker resume` goes on from its newest checkpoint"
    )


def test_the_cores_own_failures_name_their_settings() -> None:
    lost = Ending(EndReason.LOST, seconds=30.2, limit_s=30.0, not_relaunched=NONE_LEFT)
    assert ended(lost) == (
        "lost: its link to the daemon was silent for 30 s (heartbeat_timeout_s = 30 s), its"
        " process hung or gone"
    )
    stalled = Ending(EndReason.STALLED, seconds=50.0, limit_s=50.0, phase="training")
    assert ended(stalled) == (
        "stalled: no step and no new phase for 50 s in its training phase"
        " (stall_timeout_s = 50 s, scheduler.stall_action = fail)"
    )
    unsaid = Ending(EndReason.STALLED, seconds=50.0, limit_s=50.0)
    assert ended(unsaid).startswith("stalled: no step and no new phase for 50 s (")
    assert ended(Ending(EndReason.NO_HELLO)) == "never said hello"


def test_a_completion_says_how_it_was_taken() -> None:
    assert ended(Ending(EndReason.FINISHED), JobState.COMPLETED) == "finished"
    outside = ended(Ending(EndReason.ENDED_OUTSIDE_EPOCHS), JobState.COMPLETED)
    assert outside.startswith("exited with code 0 outside `job.epochs(n)`")
    gone = ended(Ending(EndReason.UNMANAGED_ENDED), JobState.COMPLETED)
    assert gone.startswith("its process ended; started by an earlier daemon")


@pytest.mark.parametrize(
    ("refused", "words"),
    [
        (NONE_LEFT, "exited with code 1"),
        (
            NotRelaunched(RelaunchRefusal.UNMANAGED),
            "exited with code 1; not relaunched: without the SDK stoker cannot tell whether it"
            " progressed",
        ),
        (
            NotRelaunched(RelaunchRefusal.BEFORE_FIRST_STEP),
            "exited with code 1; not relaunched: it failed before its first step",
        ),
        (
            NotRelaunched(RelaunchRefusal.BEFORE_FIRST_STEP, started_at=40),
            "exited with code 1; not relaunched: it failed before its first step since its"
            " relaunch from step 40",
        ),
        (
            NotRelaunched(RelaunchRefusal.FAILED_TWICE, step=30),
            "exited with code 1; not relaunched: it failed twice after completing step 30",
        ),
        (
            NotRelaunched(RelaunchRefusal.FAILED_AGAIN_BEFORE, step=118, failed_at=119),
            "exited with code 1; not relaunched: it failed again before getting past step 119"
            " (this time after step 118)",
        ),
    ],
)
def test_a_failure_says_why_it_is_not_relaunched(refused: NotRelaunched, words: str) -> None:
    failure = Ending(EndReason.EXITED, said="exited with code 1", not_relaunched=refused)
    assert ended(failure) == words


def test_a_refusal_goes_below_a_stderr_tail_on_a_line_of_its_own() -> None:
    said = "exited with code 1; stderr ends:\nTraceback\nValueError: no"
    refused = NotRelaunched(RelaunchRefusal.BEFORE_FIRST_STEP)
    words = ending_words(Ending(EndReason.EXITED, said=said, not_relaunched=refused))
    assert words == f"{said}\nnot relaunched: it failed before its first step"
    assert in_brief(words) == (
        " (exited with code 1; stderr ends: ... not relaunched: it failed before its first step)"
    )


def test_a_restart_says_its_number_its_back_off_and_the_failure() -> None:
    failure = Ending(EndReason.EXITED, said="exited with code 1")
    change = StateChanged(
        "a", JobState.RUNNING, JobState.SUBMITTED, StateReason.RESTARTING, 3, failure, 1, 10.0
    )
    assert state_words(change) == "restart 1 in 10 s: exited with code 1"
    assert event_of(Restarting("a", 1, failure)) == (
        "a",
        "restart",
        {"restarts": 1, "why": "exited with code 1"},
    )
    assert event_of(change)[2] == {
        "from": "running",
        "to": "submitted",
        "why": "restart 1 in 10 s: exited with code 1",
    }


def test_moves_that_are_no_end_say_why_or_nothing() -> None:
    def moved(reason: StateReason | None) -> str:
        return state_words(StateChanged("a", None, JobState.RUNNING, reason))

    assert moved(StateReason.REATTACHED) == "re-attached: its agent outlived the daemon"
    assert moved(StateReason.REATTACHED_UNMANAGED) == (
        "re-attached: it runs without the SDK and outlived the daemon"
    )
    assert moved(StateReason.RAN_UNMANAGED) == (
        "no hello from the SDK: runs unmanaged, its workers fixed, never paused"
    )
    assert moved(StateReason.PAUSE_TIMED_OUT) == "pause timed out: keeps its allocation"
    assert moved(None) == ""
    assert event_of(StateChanged("a", None, JobState.RUNNING)) == (
        "a",
        "state",
        {"from": "restored", "to": "running"},
    )


def test_a_stale_message_is_logged_by_its_type() -> None:
    assert event_of(StaleMessage("a", MessageKind.HEARTBEAT, 3)) == (
        "a",
        "stale",
        {"message": "heartbeat", "gen": 3},
    )
    assert event_of(StaleMessage("a", MessageKind.COMPLETED))[2] == {"message": "completed"}


def test_what_a_job_waits_for_names_the_setting() -> None:
    assert waiting_words(None) is None
    gpus = Waiting(WaitReason.GPUS, gpus=1, ahead=0, holding=("a",))
    assert waiting_words(gpus) == (
        "waiting for 1 free GPU(s) or CPU training slot(s), 0 job(s) ahead of it in the queue;"
        " job(s) a ended but keep theirs until their processes exit"
    )
    behind = waiting_words(Waiting(WaitReason.GPUS, gpus=2, ahead=1))
    assert behind is not None and "1 job(s) ahead of it in the queue" in behind
    assert "ended" not in behind
    window = Waiting(WaitReason.ARRIVAL_WINDOW, seconds_left=20.0, setting_s=30.0)
    assert waiting_words(window) == (
        "waiting for the arrival window: planned in 20 s with every job that arrives meanwhile"
        " (scheduler.arrival_window_s = 30 s)"
    )
    assert waiting_words(Waiting(WaitReason.ROUND_PAUSES)) == (
        "waiting for the jobs a plan is moving to pause: planned once they have"
    )
    sdk = Waiting(WaitReason.SDK_HELLO, seconds_left=3.0, setting_s=5.0)
    assert waiting_words(sdk) == (
        "launched; waiting for the SDK's hello (stoker.init()): a command that does not call"
        " it is taken to run without it in 3 s (scheduler.unmanaged_after_s = 5 s)"
    )
    hello = Waiting(WaitReason.HELLO, seconds_left=120.0, setting_s=120.0)
    assert waiting_words(hello) == (
        "launched; waiting for its agent's hello, at most 120 s more"
        " (scheduler.launch_timeout_s = 120 s)"
    )


def test_a_refused_curve_says_the_policys_failure() -> None:
    refusal = CurveRefused("bad", "ValueError", "math domain error")
    assert curve_refused_words(refusal) == (
        "its reported numbers were refused (ValueError: math domain error); planned on its prior"
    )
