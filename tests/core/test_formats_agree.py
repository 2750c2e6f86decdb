"""Money and measurements read the same from the server and the CLI: both follow
tests/formats_table.py (the browser's half is held to it in
tests/browser/test_numbers_read_alike.py)."""

from __future__ import annotations

import pytest

from apps.core.money import format_usd, format_usd_range, micros_to_usd
from apps.core.template_filters import sig, usd
from tests.formats_table import MEASUREMENTS, MONEY
from trainyard_cli import formats, output


@pytest.mark.parametrize(("micros", "shown"), MONEY, ids=[str(m) for m, _ in MONEY])
def test_money_reads_alike_on_pages_and_in_the_cli(micros, shown):
    assert format_usd(micros) == shown
    # The CLI gets dollars from the API (at most six decimals) and reads them the same.
    assert output.usd(micros_to_usd(micros)) == shown
    assert formats.usd_micros(micros) == shown


@pytest.mark.parametrize(("value", "shown"), MEASUREMENTS, ids=[s for _, s in MEASUREMENTS])
def test_measurements_read_alike_on_pages_and_in_the_cli(value, shown):
    assert sig(value) == shown
    assert output.text(value) == shown


def test_a_page_shows_the_full_amount_on_hover():
    assert str(usd(99_975_003)) == '<span class="money" title="$99.975003">$99.98</span>'
    assert usd(2_500_000) == "$2.50"  # nothing rounded away: plain text
    assert usd(None) == "\N{EM DASH}"


def test_a_price_band_whose_ends_read_alike_is_one_price():
    assert format_usd_range(100_000, 100_400) == "$0.10"
    assert format_usd_range(100_000, 250_000) == "$0.10\N{EN DASH}$0.25"
