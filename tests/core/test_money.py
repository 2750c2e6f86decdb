"""The one USD formatter, used by pages, the admin and job events alike (the full table
it shares with the CLI and the browser is tests/formats_table.py), and the full amount a
page shows on hover."""

import pytest

from apps.core.money import format_usd, format_usd_full


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
def test_the_full_amount_has_two_to_six_decimals_and_rounds_nothing_away(micros, shown):
    assert format_usd_full(micros) == shown


@pytest.mark.parametrize(
    ("micros", "shown"),
    [(1_234_500, "$1.23"), (4_200, "$0.004"), (1, "<$0.001"), (100_000, "$0.10")],
)
def test_it_reads_to_the_cent_or_a_tenth_of_a_cent_below_a_dollar(micros, shown):
    assert format_usd(micros) == shown
