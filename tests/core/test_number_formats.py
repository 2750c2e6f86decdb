"""How numbers and times read on every page (apps.core.template_filters)."""

from datetime import UTC, datetime

import pytest

from apps.core.template_filters import human_duration, sci, sig, when


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (0.00015000000000000001, "1.5e-4"),
        (2e-05, "2e-5"),
        (1e-09, "1e-9"),
        (0.003, "3e-3"),
        (0.5, "0.5"),
        (0, "0"),
        (None, "—"),
        ("not a number", "—"),
    ],
)
def test_learning_rates_read_in_short_scientific_notation(value, shown):
    assert sci(value) == shown


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (2.718281828, "2.718"),
        (0.000123456, "0.0001235"),
        (1234.56, "1235"),
        (0.5, "0.5"),
        (float("nan"), "NaN"),
        (float("inf"), "∞"),
        (float("-inf"), "-∞"),
    ],
)
def test_losses_read_to_four_significant_digits(value, shown):
    assert sig(value) == shown


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(0, "0s"), (42, "42s"), (192, "3m 12s"), (3725, "1h 02m"), (270_000, "3d 3h"), (None, "—")],
)
def test_durations_read_in_the_largest_units_that_fit(seconds, shown):
    assert human_duration(seconds) == shown


def test_a_moment_is_a_time_element_in_utc_with_the_utc_value_on_hover():
    moment = datetime(2026, 12, 2, 9, 5, 7, tzinfo=UTC)
    assert str(when(moment, "time")) == (
        '<time datetime="2026-12-02T09:05:07Z" data-style="time" '
        'title="2026-12-02 09:05:07 UTC">09:05:07</time>'
    )
    assert when(None) == "—"
