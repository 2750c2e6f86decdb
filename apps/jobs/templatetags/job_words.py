"""Job facts in words, for every template (a template builtin, see settings)."""

from __future__ import annotations

from django import template

from apps.jobs.reasons import reason_text as _reason_text

register = template.Library()


@register.filter
def reason_text(code: str | None) -> str:
    """`{{ job.reason|reason_text }}`: "The workload exited with code 1." for `exit_code_1`."""
    return _reason_text(code)
