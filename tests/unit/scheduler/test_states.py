from itertools import pairwise

import pytest

from scheduler.errors import IllegalTransition
from scheduler.states import FINAL_STATES, TRANSITIONS, JobState, check_transition


def test_every_state_has_a_row_and_final_states_have_no_exit() -> None:
    assert set(TRANSITIONS) == set(JobState)
    for state in FINAL_STATES:
        assert TRANSITIONS[state] == frozenset()
        assert state.final


@pytest.mark.parametrize(
    ("current", "new"),
    [
        (JobState.COMPLETED, JobState.RUNNING),
        (JobState.SUBMITTED, JobState.RUNNING),
        (JobState.PAUSED, JobState.PAUSING),
        (JobState.CANCELLED, JobState.CANCELLED),
    ],
)
def test_anything_off_the_table_raises_and_names_the_job(current: JobState, new: JobState) -> None:
    with pytest.raises(IllegalTransition) as caught:
        check_transition("job7", current, new)
    assert "job7" in str(caught.value)
    assert current.value in str(caught.value)


def test_the_happy_path_is_legal() -> None:
    path = [
        JobState.SUBMITTED,
        JobState.PENDING,
        JobState.STARTING,
        JobState.RUNNING,
        JobState.PAUSING,
        JobState.PAUSED,
        JobState.RESUMING,
        JobState.RUNNING,
        JobState.COMPLETED,
    ]
    for current, new in pairwise(path):
        check_transition("job", current, new)
