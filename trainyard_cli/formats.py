"""How numbers read in the CLI: the same rules as the server's (apps/core/money.py
`format_usd`, apps/core/template_filters.py `sig`) and the browser's (static/js/format.js),
kept here because the CLI never imports the server's apps. tests/core/test_formats_agree.py
holds the three to one table of values.

- money to the cent at or above a dollar (`$1,234.50`), to a tenth of a cent below one
  (`$0.042`, `$0.10`), `<$0.001` for a non-zero amount that rounds to nothing;
- losses and other measurements to 4 significant digits (`7.603`, `1.235e-5`).
"""

from __future__ import annotations

import math
from decimal import ROUND_HALF_UP, Decimal

MICROS_PER_USD = 1_000_000
_CENT = 10_000
_TENTH_OF_A_CENT = 1_000


def _round_half_up(micros: int, step: int) -> int:
    return (micros + step // 2) // step * step


def usd_micros(micros: int | None) -> str:
    """Micro-dollars for people; `-` for none (the CLI's blank)."""
    if micros is None:
        return "-"
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


def usd(dollars: float | str | None) -> str:
    """Dollars as the API writes them (at most six decimals) for people."""
    if dollars is None:
        return "-"
    return usd_micros(round(float(dollars) * MICROS_PER_USD))


def sig(value: float, digits: int = 4) -> str:
    """A measurement to `digits` significant digits, `%g`'s notation with a short
    exponent: 7.60291 → `7.603`, 12345678 → `1.235e7`."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "∞" if value > 0 else "-∞"
    return _significant(value, digits)


def _significant(number: float, digits: int) -> str:
    """`number` (finite) to `digits` significant digits, halves away from zero on the exact
    binary value, as JavaScript's toPrecision does (Python's `%g` rounds a tie such as
    1.0625 to even, `1.062`; the browser reads `1.063`). `%g`'s choice of notation with a
    short exponent: `1.235e7`, `1.235e-5`."""
    exact = Decimal(number)
    if exact == 0:
        return "0"
    rounded = exact.quantize(Decimal(1).scaleb(exact.adjusted() - digits + 1), ROUND_HALF_UP)
    exponent = rounded.adjusted()  # 9.9996 rounds up a decade, to 10.00
    if exponent < -4 or exponent >= digits:
        mantissa = _strip(f"{rounded.scaleb(-exponent):f}")
        return f"{mantissa}e{exponent}"
    return _strip(f"{rounded:f}")


def _strip(text: str) -> str:
    return text.rstrip("0").rstrip(".") if "." in text else text
