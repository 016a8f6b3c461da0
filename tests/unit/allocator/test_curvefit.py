"""A measured curve's fit (allocator/curvefit.py) on any points a request may send: the
points are checked, and any that pass give a finite, positive knee (no NaN reaches a plan)."""

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from allocator.curvefit import curve_problem, fit_knee

WORKERS = st.lists(st.floats(1e-3, 4096), min_size=2, max_size=8, unique=True).map(sorted)
RATES = st.lists(st.floats(1e-3, 1e8), min_size=2, max_size=8).map(sorted)


@settings(max_examples=150, deadline=None)
@given(WORKERS, RATES)
def test_points_that_pass_the_checks_give_a_finite_knee(
    workers: list[float], rates: list[float]
) -> None:
    count = min(len(workers), len(rates))
    workers, rates = workers[:count], rates[:count]
    if curve_problem(workers, rates) is not None:
        return
    knee = fit_knee(workers, rates)
    for value in (knee.sample_cost_s, knee.peak_samples_per_s, knee.sharpness):
        assert math.isfinite(value) and value > 0.0, knee


def test_a_smooth_knee_is_found_again() -> None:
    workers = [1.0, 2.0, 4.0, 8.0, 16.0]
    rates = [(1000.0**-6 + (d / 0.004) ** -6) ** (-1 / 6) for d in workers]
    knee = fit_knee(workers, rates)
    assert math.isclose(knee.sample_cost_s, 0.004, rel_tol=0.05)
    assert math.isclose(knee.peak_samples_per_s, 1000.0, rel_tol=0.05)
    assert knee.worst_error < 0.05


def test_the_same_points_are_fitted_once() -> None:
    # A profiled job's request is made again for each of its heartbeats (daemon/jobbook.py).
    workers, rates = [1, 2, 4], [100.0, 190.0, 260.0]
    assert fit_knee(workers, rates) is fit_knee(tuple(workers), tuple(rates))
