"""What `GET /v1/jobs/{id}/metrics?points=N` serves of a long series (daemon/joblogs.py)."""

import pytest

from daemon.metricpages import thin as _thin


@pytest.mark.parametrize("points", [1, 2, 3, 4, 7, 50])
def test_a_series_is_thinned_to_the_points_asked_with_the_newest_among_them(points: int) -> None:
    series = [[step, float(step)] for step in range(1, 11)]
    kept = _thin(series, points)
    assert len(kept) == min(points, len(series))
    assert kept[-1] == [10, 10.0], "the newest is always served"
    if points >= 2:
        assert kept[0] == [1, 1.0]
    steps = [step for step, _ in kept]
    assert steps == sorted(set(steps)), "each point once, oldest first"
