"""The one USD formatter, used by pages, the admin and job events alike."""

import pytest

from apps.core.money import format_usd


@pytest.mark.parametrize(
    ("micros", "shown"),
    [
        (0, "$0.00"),
        (100_000, "$0.10"),
        (2_490_000, "$2.49"),
        (1_234_500, "$1.2345"),
        (4_200, "$0.0042"),
        (1, "$0.000001"),
        (1_234_567_890_000, "$1,234,567.89"),
        (-2_500_000, "-$2.50"),
        (None, "\N{EM DASH}"),
    ],
)
def test_it_shows_dollars_with_two_to_six_decimals_and_rounds_nothing_away(micros, shown):
    assert format_usd(micros) == shown
