"""The contention curve and the points the allocator reads it from."""

import bisect
import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tpm import ContentionFit, ModelFormatError
from tpm.fields import Fields

PAPER_LIKE = ContentionFit(
    contention_from=11.0, saturation_from=24.0, contention_slope=0.4, observed_max_workers=32.0
)


def read_points(points: tuple[tuple[float, float], ...], workers: float) -> float:
    """eta as the allocator reads the points: linear between, capacity flat past the last."""
    ds = [d for d, _ in points]
    if workers <= ds[0]:
        return points[0][1]
    if workers >= ds[-1]:
        return points[-1][1] * ds[-1] / workers
    right = bisect.bisect_right(ds, workers)
    (d0, e0), (d1, e1) = points[right - 1], points[right]
    return e0 + (e1 - e0) * (workers - d0) / (d1 - d0)


def test_capacity_has_three_stages() -> None:
    assert PAPER_LIKE.capacity(5) == 5
    assert PAPER_LIKE.capacity(11) == 11
    assert PAPER_LIKE.capacity(16) == pytest.approx(11 + 0.4 * 5)
    assert PAPER_LIKE.capacity(24) == pytest.approx(11 + 0.4 * 13)
    assert PAPER_LIKE.capacity(30) == PAPER_LIKE.capacity(24)
    assert PAPER_LIKE.stages == 3
    assert PAPER_LIKE.stage_slopes() == [1.0, 0.4, 0.0]


def test_points_start_at_one_worker_and_end_at_saturation() -> None:
    points = PAPER_LIKE.points()
    assert points[0] == (1.0, 1.0)
    assert points[1] == (11.0, 1.0)
    assert points[-1][0] == 24.0
    assert points[-1][1] == pytest.approx((11 + 0.4 * 13) / 24)


def test_without_saturation_capacity_is_held_flat_past_the_largest_observed_load() -> None:
    curve = ContentionFit(11.0, None, 0.5, observed_max_workers=20.0)
    assert curve.capacity(20) == pytest.approx(11 + 0.5 * 9)
    assert curve.capacity(40) == curve.capacity(20)
    assert curve.points()[-1][0] == 20.0
    assert curve.stage_slopes() == [1.0, 0.5]


def test_a_contention_free_curve_is_two_points_of_eta_one() -> None:
    curve = ContentionFit(None, None, 1.0, observed_max_workers=32.0)
    assert curve.points() == ((1.0, 1.0), (32.0, 1.0))
    assert curve.stages == 1


@st.composite
def curves(draw: st.DrawFn) -> ContentionFit:
    observed = draw(st.floats(1.0, 128.0))
    first = draw(st.none() | st.floats(1.0, observed))
    second = None
    if first is not None and first < observed:
        second = draw(st.none() | st.floats(first, observed).filter(lambda k: k > first))
    slope = draw(st.floats(0.0, 1.0))
    return ContentionFit(first, second, slope, observed)


@given(curves())
def test_points_are_increasing_with_eta_in_range_and_never_rising(curve: ContentionFit) -> None:
    points = curve.points()
    ds = [d for d, _ in points]
    etas = [eta for _, eta in points]
    assert ds == sorted(set(ds))
    assert ds[0] == 1.0
    assert all(0.0 < eta <= 1.0 for eta in etas)
    assert all(later <= earlier for earlier, later in itertools.pairwise(etas))


@given(curves(), st.integers(1, 200))
def test_reading_the_points_gives_the_curve_at_every_whole_worker_count(
    curve: ContentionFit, workers: int
) -> None:
    assert read_points(curve.points(), workers) == pytest.approx(
        curve.efficiency(workers), rel=1e-9
    )


@pytest.mark.parametrize(
    ("first", "second", "slope", "observed", "problem"),
    [
        (11.0, 24.0, 1.5, 32.0, "contention_slope must lie in [0, 1]"),
        (0.5, None, 0.5, 32.0, "contention_from must lie between 1 and observed_max_workers"),
        (None, 24.0, 0.5, 32.0, "saturation_from needs contention_from below it"),
        (11.0, 8.0, 0.5, 32.0, "saturation_from needs contention_from below it"),
        (None, None, 1.0, 0.0, "observed_max_workers must be at least 1"),
    ],
)
def test_inconsistent_saved_curves_are_refused(
    first: float | None, second: float | None, slope: float, observed: float, problem: str
) -> None:
    fields = Fields.root(
        {
            "contention_from": first,
            "saturation_from": second,
            "contention_slope": slope,
            "observed_max_workers": observed,
        },
        "m.json",
    )
    with pytest.raises(ModelFormatError, match=problem.replace("[", r"\[").replace("]", r"\]")):
        ContentionFit.from_fields(fields)
