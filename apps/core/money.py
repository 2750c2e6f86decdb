"""Money is integer micro-dollars everywhere inside (1,000,000 = $1); dollars exist only at
the edges: API bodies, forms and pages."""

from __future__ import annotations

from decimal import Decimal

MICROS_PER_USD = 1_000_000


def usd_to_micros(value: Decimal | float | int | None) -> int | None:
    if value is None:
        return None
    return int((Decimal(str(value)) * MICROS_PER_USD).to_integral_value())


def micros_to_usd(micros: int | None) -> float | None:
    return None if micros is None else round(micros / MICROS_PER_USD, 6)


def format_usd(micros: int | None) -> str:
    """Micro-dollars for people, the one formatter of pages, admin and events: `$1,234.50`,
    `$0.0042` — at least two decimals, at most six, nothing rounded away; `—` for none."""
    if micros is None:
        return "\N{EM DASH}"
    sign = "-" if micros < 0 else ""
    whole, fraction = divmod(abs(micros), MICROS_PER_USD)
    decimals = f"{fraction:06d}".rstrip("0").ljust(2, "0")
    return f"{sign}${whole:,}.{decimals}"
