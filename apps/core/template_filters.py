"""Filters every template has (registered as template builtins in settings)."""

from __future__ import annotations

from django import template
from django.utils import timezone

from apps.core.money import format_usd

register = template.Library()


@register.filter
def usd(micros: int | None) -> str:
    """Micro-dollars as dollars, with the sign: `{{ job.accrued_micros|usd }}`."""
    return format_usd(micros)


@register.filter
def duration(job) -> str:
    """How long a job has run (or ran): from its start to its end, or to now."""
    if job.started_at is None:
        return "—"
    end = job.terminal_at or timezone.now()
    seconds = int((end - job.started_at).total_seconds())
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    return f"{hours}h {minutes:02d}m" if hours else f"{minutes}m {seconds:02d}s"
