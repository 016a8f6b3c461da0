"""The CLI's small formatters: what a user reads in `stoker jobs` and `stoker show`."""

import pytest

from cli.common import signed_percent, span


@pytest.mark.parametrize(
    ("fraction", "shown"),
    [(0.04, "+4%"), (-0.12, "-12%"), (-0.004, "0%"), (0.0049, "0%"), (0.0, "0%"), (1.5, "+150%")],
)
def test_a_relative_difference_has_its_sign_and_none_for_what_rounds_to_nothing(
    fraction: float, shown: str
) -> None:
    assert signed_percent(fraction) == shown


@pytest.mark.parametrize(
    ("seconds", "shown"), [(-1.0, "0 s"), (45.2, "45 s"), (720.0, "12 min"), (12_600.0, "3.5 h")]
)
def test_a_length_of_time_reads_in_its_unit(seconds: float, shown: str) -> None:
    assert span(seconds) == shown
