"""A job's time left, from the pace of its heartbeats."""

import pytest

from daemon.progress import Pace


def test_the_time_left_is_the_iterations_left_at_the_last_minutes_pace() -> None:
    pace = Pace()
    for second in range(0, 4):
        pace.saw("a", float(second), 10 * second)
    assert pace.seconds_left("a", 1_000) is None, "3 s of heartbeats promise nothing yet"
    for second in range(4, 120):  # 10 iterations a second, then 5 from 90 s on
        pace.saw("a", float(second), 10 * min(second, 90) + 5 * max(0, second - 90))
    # The last minute (59 to 119 s): 31 s at 10 a second, 29 at 5: 455 iterations.
    assert pace.seconds_left("a", 1_045 + 455) == pytest.approx(60.0), "455 more: a minute"
    assert pace.seconds_left("a", 10) == 0.0, "past its end: none left"


def test_a_pause_slows_the_pace_and_a_relaunch_from_a_checkpoint_starts_it_again() -> None:
    pace = Pace()
    for second in range(0, 20):
        pace.saw("a", float(second), 10 * second)
    pace.saw("a", 40.0, 200)  # paused from 19 to 39 s: 10 iterations in 21 s
    assert pace.seconds_left("a", 400) == pytest.approx(200 * 40 / 200)
    pace.saw("a", 50.0, 120)  # relaunched from its checkpoint at 120
    assert pace.seconds_left("a", 400) is None
    pace.forget("a")
    assert pace.seconds_left("a", 400) is None
