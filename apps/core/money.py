"""Money is integer micro-dollars everywhere inside (1,000,000 = $1); dollars exist only at
the edges: API bodies, forms and pages.

How money reads for people is decided here and nowhere else on the server
(`format_usd`); the browser (`static/js/format.js`) and the CLI
(`trainyard_cli/formats.py`) apply the same rules, and tests/core/test_formats_agree.py
holds all three to one table of values.
"""

from __future__ import annotations

from decimal import Decimal

MICROS_PER_USD = 1_000_000
_CENT = 10_000  # micro-dollars
_TENTH_OF_A_CENT = 1_000


def usd_to_micros(value: Decimal | float | int | None) -> int | None:
    if value is None:
        return None
    return int((Decimal(str(value)) * MICROS_PER_USD).to_integral_value())


def micros_to_usd(micros: int | None) -> float | None:
    return None if micros is None else round(micros / MICROS_PER_USD, 6)


def _round_half_up(micros: int, step: int) -> int:
    """`micros` (not negative) to the nearest multiple of `step`, halves up."""
    return (micros + step // 2) // step * step


def format_usd(micros: int | None) -> str:
    """Micro-dollars for people, the one formatter of pages, charts, admin and events:
    to the cent at or above a dollar (`$1,234.50`), to a tenth of a cent below one
    (`$0.042`, `$0.10`: a third decimal only where it is not zero); an amount that is not
    zero but rounds to nothing reads `<$0.001`. `—` for none. The full value is
    `format_usd_full`'s (a page's tooltip)."""
    if micros is None:
        return "\N{EM DASH}"
    sign = "-" if micros < 0 else ""
    magnitude = abs(micros)
    if _round_half_up(magnitude, _TENTH_OF_A_CENT) >= MICROS_PER_USD:
        whole, fraction = divmod(_round_half_up(magnitude, _CENT), MICROS_PER_USD)
        return f"{sign}${whole:,}.{fraction // _CENT:02d}"
    tenths = _round_half_up(magnitude, _TENTH_OF_A_CENT) // _TENTH_OF_A_CENT
    if tenths == 0:
        return "$0.00" if magnitude == 0 else f"{sign}<$0.001"
    decimals = f"{tenths:03d}"
    return f"{sign}$0.{decimals[:2] if decimals.endswith('0') else decimals}"


def format_usd_full(micros: int | None) -> str:
    """Micro-dollars with nothing rounded away: `$99.975003`, `$1,234.50` (at least two
    decimals, at most six). `—` for none."""
    if micros is None:
        return "\N{EM DASH}"
    sign = "-" if micros < 0 else ""
    whole, fraction = divmod(abs(micros), MICROS_PER_USD)
    decimals = f"{fraction:06d}".rstrip("0").ljust(2, "0")
    return f"{sign}${whole:,}.{decimals}"


def format_usd_range(low: int | None, high: int | None) -> str:
    """A price band, `$0.10` and `$0.25` with an en dash between; one price where both
    ends read the same (`$0.10`)."""
    low_text, high_text = format_usd(low), format_usd(high)
    return low_text if low_text == high_text else f"{low_text}\N{EN DASH}{high_text}"
