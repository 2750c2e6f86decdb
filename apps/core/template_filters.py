"""Filters every template has (registered as template builtins in settings)."""

from __future__ import annotations

from django import template
from django.utils import timezone

from apps.core.money import micros_to_usd

register = template.Library()


@register.filter
def usd(micros: int | None) -> str:
    """Micro-dollars as dollars: 2 decimals, more when the amount is under a cent."""
    if micros is None:
        return "—"
    value = micros_to_usd(micros)
    return f"{value:.2f}" if value >= 0.01 or value == 0 else f"{value:.4f}"


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
