import pytest

from allocator import ContentionCurve, InvalidRequest


def test_interpolates_between_points_and_holds_capacity_flat_past_the_last() -> None:
    curve = ContentionCurve(((1.0, 1.0), (11.0, 1.0), (24.0, 0.75)))
    assert curve.efficiency(0.5) == 1.0
    assert curve.efficiency(11) == 1.0
    assert curve.efficiency(17.5) == pytest.approx(0.875)
    assert curve.capacity(24) == pytest.approx(18.0)
    assert curve.capacity(48) == pytest.approx(18.0)
    assert curve.efficiency(48) == pytest.approx(0.375)


def test_no_points_is_contention_free() -> None:
    curve = ContentionCurve.contention_free()
    assert curve.efficiency(1) == curve.efficiency(1000) == 1.0


@pytest.mark.parametrize(
    ("pairs", "field", "words"),
    [
        ([], "node.contention", "omit it"),
        ([[1, 1.0], [1, 0.9]], "node.contention[1]", "increasing"),
        ([[0, 1.0]], "node.contention[0]", "positive"),
        ([[1, 1.2]], "node.contention[0]", "(0, 1]"),
        ([[1, 0.8], [5, 0.9]], "node.contention[1]", "must not increase"),
        ([[1, 0.8, 3]], "node.contention[0]", "pair"),
    ],
)
def test_bad_curves_name_the_point(pairs: list[list[float]], field: str, words: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        ContentionCurve.from_pairs(pairs)
    assert caught.value.field == field
    assert words in str(caught.value)
