"""The node's contention learned from jobs' loader timings together (tpm/joint.py)."""

import math
import random

import pytest

from allocator.contention import ContentionCurve
from tpm.joint import LEAST_ETA, MIN_CELL, LoaderTiming, fit_joint_contention

FREE_UNTIL = 6.0  # the truth's contention-free workers
SATURATED = 14.0  # and the capacity it approaches
FREE = ContentionCurve.contention_free()  # a prior of single-job profiles that saw none


def true_eta(processes: float) -> float:
    """A smooth truth as the simulator's (workloads/truth.py): eta 1 up to FREE_UNTIL, then
    capacity approaching SATURATED."""
    if processes <= FREE_UNTIL:
        return 1.0
    headroom = SATURATED - FREE_UNTIL
    capacity = FREE_UNTIL + headroom * (1.0 - math.exp(-(processes - FREE_UNTIL) / headroom))
    return capacity / processes


def timed(
    costs: dict[str, float], loads: dict[str, list[int]], *, per_cell: int = 10, noise: float = 0.05
) -> list[LoaderTiming]:
    """Heartbeats of each job at each of its loads: c / eta(D) with lognormal noise."""
    rng = random.Random(7)
    return [
        LoaderTiming(job, load, costs[job] / true_eta(load) * math.exp(rng.gauss(0.0, noise)))
        for job, at in loads.items()
        for load in at
        for _ in range(per_cell)
    ]


def read(points: tuple[tuple[float, float], ...], load: float) -> float:
    """eta as the allocator reads points (allocator/contention.py)."""
    return ContentionCurve(points).efficiency(load)


def test_jobs_measured_together_recover_the_node_curve_within_5_percent() -> None:
    costs = {"resnet": 0.01, "vgg": 0.03, "speech": 0.08}
    loads = {"resnet": [3, 6, 9, 12], "vgg": [9, 12, 16, 20], "speech": [16, 20, 24, 30]}
    no_contention = FREE  # single-job profiles that saw none
    points = fit_joint_contention(timed(costs, loads), no_contention, most=30)
    assert points is not None
    for load in (3, 6, 9, 12, 16, 20, 24, 30):
        assert read(points, load) == pytest.approx(true_eta(load), rel=0.05), load
    etas = [eta for _, eta in points]
    assert etas == sorted(etas, reverse=True)
    assert all(0.0 < eta <= 1.0 for eta in etas)


def test_past_the_loads_seen_the_priors_shape_holds_up_to_the_most() -> None:
    costs = {"a": 0.02, "b": 0.05}
    timings = timed(costs, {"a": [4, 8, 12], "b": [8, 12, 16]})
    points = fit_joint_contention(timings, FREE, most=24)
    assert points is not None
    assert read(points, 24) == pytest.approx(read(points, 16)), "no contention said the prior"
    assert 40 * read(points, 40) == pytest.approx(24 * read(points, 24)), "flat past the most"
    contending = ((8.0, 1.0), (24.0, 0.5))
    points = fit_joint_contention(timings, ContentionCurve(contending), most=24)
    assert points is not None
    scale = read(points, 16) / read(contending, 16)
    assert read(points, 20) == pytest.approx(read(contending, 20) * scale)


def test_a_job_seen_at_one_load_says_nothing_of_the_node() -> None:
    """Its timings fit any curve: its own cost absorbs the node's contention there, as a
    single-job profile's saturation would."""
    alone = timed({"a": 0.02, "b": 0.05}, {"a": [8], "b": [16]})
    assert fit_joint_contention(alone, ContentionCurve(((1.0, 1.0), (24.0, 0.5))), most=24) is None


def test_too_few_timings_at_a_load_are_not_a_measurement() -> None:
    few = timed({"a": 0.02}, {"a": [4, 16]}, per_cell=MIN_CELL - 1)
    assert fit_joint_contention(few, FREE, most=16) is None
    enough = timed({"a": 0.02}, {"a": [4, 16]}, per_cell=MIN_CELL)
    assert fit_joint_contention(enough, FREE, most=16) is not None


def test_the_prior_holds_where_no_job_reaches_and_sets_the_scale() -> None:
    """Timings say eta's ratios; the prior says where the curve starts: at the least load
    measured the fit is the prior's, and below it the prior stands."""
    prior = ((1.0, 1.0), (4.0, 0.8), (30.0, 0.75))  # wrong in shape, but the scale
    points = fit_joint_contention(
        timed({"a": 0.02}, {"a": [10, 20]}, per_cell=30), ContentionCurve(prior), most=30
    )
    assert points is not None
    for load in (2, 4, 10):
        assert read(points, load) == pytest.approx(read(prior, load)), load
    ratio = read(points, 20) / read(points, 10)
    assert ratio == pytest.approx(true_eta(20) / true_eta(10), rel=0.05)
    assert ratio != pytest.approx(read(prior, 20) / read(prior, 10), rel=0.05), "measured"


@pytest.mark.parametrize(
    ("at_2", "at_4"), [(1e200, 1e-200), (1e-200, 1e200), (5e-324, 1.0), (float("nan"), 1.0)]
)
def test_timings_no_node_could_give_still_make_a_curve(at_2: float, at_4: float) -> None:
    """A job whose pipeline changed between loads, or a broken clock: never an error that
    would stop every later round, and never an eta a plan cannot use."""
    timings = [LoaderTiming("a", load, t) for load, t in ((2, at_2), (4, at_4)) for _ in range(3)]
    timings += [LoaderTiming("b", load, 0.01) for load in (2, 4) for _ in range(3)]
    points = fit_joint_contention(timings, FREE, most=8)
    assert points is not None
    ContentionCurve(points)  # valid: loads increasing, eta in (0, 1] and never rising
    assert min(eta for _, eta in points) >= LEAST_ETA


def test_noise_never_makes_eta_rise_with_load() -> None:
    noisy = timed({"a": 0.02, "b": 0.04}, {"a": [2, 3, 4, 5], "b": [3, 4, 5, 6]}, noise=0.3)
    points = fit_joint_contention(noisy, FREE, most=8)
    assert points is not None
    etas = [eta for _, eta in points]
    assert etas == sorted(etas, reverse=True)
