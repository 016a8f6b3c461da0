"""What an exit of a job's processes means (`scheduler/exits.py`): one row per branch."""

import pytest

from scheduler.exits import AfterEnd, ExitFacts, ExitKind, ExitVerdict, after_end, classify_exit
from scheduler.states import JobState

RUNNING, STARTING, COMPLETED = JobState.RUNNING, JobState.STARTING, JobState.COMPLETED

CASES = [
    # (facts, verdict)
    (ExitFacts(0, None), ExitVerdict(ExitKind.ENDED_BEFORE)),
    (ExitFacts(1, JobState.FAILED, last_step=9), ExitVerdict(ExitKind.ENDED_BEFORE)),
    (
        ExitFacts(-15, JobState.CANCELLED, last_step=7),
        ExitVerdict(ExitKind.ENDED_BEFORE, stopped_at=7),
    ),
    (ExitFacts(0, JobState.CANCELLED), ExitVerdict(ExitKind.ENDED_BEFORE)),
    (ExitFacts(0, JobState.PAUSED, cold_paused=True), ExitVerdict(ExitKind.COLD_RESIZE)),
    (
        ExitFacts(1, JobState.PAUSED, cold_paused=True, last_step=3),
        ExitVerdict(ExitKind.FAILED, last_word=3),
    ),
    (ExitFacts(1, RUNNING, finished=50), ExitVerdict(ExitKind.FINISHED, final_iteration=50)),
    (ExitFacts(0, RUNNING, unmanaged=True), ExitVerdict(ExitKind.FINISHED_WITHOUT_SDK)),
    (ExitFacts(0, STARTING, command=True), ExitVerdict(ExitKind.FINISHED_WITHOUT_SDK)),
    (ExitFacts(None, RUNNING, unmanaged=True), ExitVerdict(ExitKind.ADOPTED_UNMANAGED_ENDED)),
    (
        ExitFacts(0, RUNNING, last_step=12),
        ExitVerdict(ExitKind.ENDED_OUTSIDE_EPOCHS, last_word=12),
    ),
    (ExitFacts(0, RUNNING, stop_signal=15), ExitVerdict(ExitKind.FAILED)),
    (ExitFacts(0, JobState.PAUSING), ExitVerdict(ExitKind.FAILED)),
    (ExitFacts(0, STARTING), ExitVerdict(ExitKind.FAILED)),  # the SDK's, before its hello
    (ExitFacts(2, RUNNING, last_step=4), ExitVerdict(ExitKind.FAILED, last_word=4)),
    (ExitFacts(None, RUNNING), ExitVerdict(ExitKind.FAILED)),
    (ExitFacts(-9, RUNNING, unmanaged=True), ExitVerdict(ExitKind.FAILED)),
]


@pytest.mark.parametrize(("facts", "verdict"), CASES)
def test_an_exit_is_classified_by_its_facts(facts: ExitFacts, verdict: ExitVerdict) -> None:
    assert classify_exit(facts) == verdict


def test_only_a_cold_resize_exit_goes_unnoted() -> None:
    noted = {kind: ExitVerdict(kind).noted for kind in ExitKind}
    assert [kind for kind, said in noted.items() if not said] == [ExitKind.COLD_RESIZE]


def test_a_signal_is_the_negative_exit_code() -> None:
    assert ExitFacts(-9, RUNNING).signal == 9
    assert ExitFacts(1, RUNNING).signal is None
    assert ExitFacts(None, RUNNING).signal is None


AFTER_END = [
    # (code, state after the exit, stopped by the daemon, after_end)
    (1, COMPLETED, None, AfterEnd.FAILED),
    (-15, COMPLETED, AfterEnd.STOPPED, AfterEnd.STOPPED),
    (-15, COMPLETED, AfterEnd.OVERRAN, AfterEnd.OVERRAN),
    (0, COMPLETED, AfterEnd.OVERRAN, None),  # exit 0: nothing went wrong after its end
    (None, COMPLETED, None, None),  # an adopted agent's code is not known
    (1, JobState.FAILED, None, None),  # not completed: its failure says it
    (1, None, None, None),
]


@pytest.mark.parametrize(("code", "state", "stopped", "expected"), AFTER_END)
def test_what_came_after_a_completed_jobs_end_is_classified(
    code: int | None, state: JobState | None, stopped: AfterEnd | None, expected: AfterEnd | None
) -> None:
    assert after_end(code, state, stopped) is expected
