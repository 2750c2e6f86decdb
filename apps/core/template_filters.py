"""Filters every template has (registered as template builtins in settings), and the one
place that decides how numbers read on a page (docs/dashboard.md):

- money by the one USD formatter (`usd`: to the cent, a tenth of a cent below a dollar, the
  full value on hover);
- learning rates and other tiny or huge values in scientific notation (`sci`: `1.5e-4`);
- losses and other measurements to 4 significant digits (`sig`);
- durations as `42s`, `3m 12s`, `2h 05m`, `3d 4h` (`duration`, `seconds`; `live_duration`
  ticks in the browser while a job runs);
- times as a `<time>` element (`when`): the server writes UTC, the page's script rewrites
  the text in the browser's time zone and keeps the UTC value on hover.

`static/js/format.js` applies the same rules in the browser (chart tooltips, live cells).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal

from django import template
from django.utils import timezone
from django.utils.html import format_html

from apps.core.money import format_usd, format_usd_full

register = template.Library()


@register.filter
def usd(micros: int | None) -> str:
    """Micro-dollars as dollars, with the sign: `{{ job.accrued_micros|usd }}` is
    `<span class="money" title="$99.975003">$99.98</span>` (`format_usd`, the full value on
    hover where it was rounded)."""
    short, full = format_usd(micros), format_usd_full(micros)
    if short == full:  # nothing rounded away: no tooltip to add
        return short
    return format_html('<span class="money" title="{}">{}</span>', full, short)


def _number(value) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number


@register.filter
def sci(value, digits: int = 2) -> str:
    """A number in short scientific notation: 0.00015000000000000001 → `1.5e-4`, 2e-05 →
    `2e-5`; zero is `0`; values between 0.01 and 10,000 stay plain (`0.5`). `—` for none."""
    number = _number(value)
    if number is None:
        return "—"
    if not math.isfinite(number):
        return str(number)
    if number == 0:
        return "0"
    if 0.01 <= abs(number) < 10_000:
        return f"{number:.{int(digits) + 1}g}"
    mantissa, exponent = f"{number:.{int(digits) - 1}e}".split("e")
    mantissa = mantissa.rstrip("0").rstrip(".") if "." in mantissa else mantissa
    return f"{mantissa}e{int(exponent)}"


@register.filter
def sig(value, digits: int = 4) -> str:
    """A measurement to `digits` significant digits: 2.718281 → `2.718`, 0.000123456 →
    `0.0001235`, 1234.56 → `1235`, 12345678 → `1.235e7`, 0.0000123456 → `1.235e-5`
    (`%g`'s choice of notation, the exponent written short; a tie rounds away from zero, as
    in the browser). NaN and infinity as such."""
    number = _number(value)
    if number is None:
        return "—"
    if math.isnan(number):
        return "NaN"
    if math.isinf(number):
        return "∞" if number > 0 else "-∞"
    return _significant(number, int(digits))


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


def human_duration(seconds: float | int | None) -> str:
    """`42s`, `3m 12s`, `2h 05m`, `3d 4h`; `—` for none."""
    if seconds is None:
        return "—"
    seconds = max(0, int(seconds))
    days, rest = divmod(seconds, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"


@register.filter
def duration(job) -> str:
    """How long a job has run (or ran): from its start to its end, or to now."""
    if job.started_at is None:
        return "—"
    end = job.terminal_at or timezone.now()
    return human_duration((end - job.started_at).total_seconds())


@register.filter
def live_duration(job) -> str:
    """`duration`, ticking in the browser while the job runs: the seconds elapsed when this
    was rendered ride along (`data-elapsed-s`), and the page's script counts on from the
    moment it received them, so a running job's duration moves between pushes and no clock
    but the server's is trusted."""
    if job.started_at is None or job.terminal_at is not None:
        return duration(job)
    elapsed = max(0, int((timezone.now() - job.started_at).total_seconds()))
    return format_html('<span data-elapsed-s="{}">{}</span>', elapsed, human_duration(elapsed))


@register.filter
def seconds(value) -> str:
    """A number of seconds for people (`human_duration`)."""
    return human_duration(_number(value))


@register.filter
def when(moment: datetime | None, style: str = "datetime") -> str:
    """A moment as `<time datetime="…" title="… UTC">`: the text is UTC until the page's
    script rewrites it in the browser's time zone (`style`: `datetime`, `time` or
    `date`). `—` for none."""
    if moment is None:
        return "—"
    utc = moment.astimezone(UTC)
    iso = utc.strftime("%Y-%m-%dT%H:%M:%SZ")
    text = {
        "time": utc.strftime("%H:%M:%S"),
        "date": utc.strftime("%Y-%m-%d"),
    }.get(style, utc.strftime("%Y-%m-%d %H:%M:%S"))
    return format_html(
        '<time datetime="{}" data-style="{}" title="{} UTC">{}</time>',
        iso,
        style,
        utc.strftime("%Y-%m-%d %H:%M:%S"),
        text,
    )
