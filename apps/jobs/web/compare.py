"""The compare page (`o/<org>/jobs/compare/?ids=job_a,job_b`): the picked jobs' curves of
one metric overlaid on one chart, their configuration differences, final and best metrics,
cost and duration (`apps.jobs.comparison`; docs/dashboard.md).

Live by polling, not by the jobs' websockets: each job page's socket pushes partials shaped
for that page (log lines, event rows, loss-only chart points, a sequence per job), so up to
ten sockets would carry mostly what this page throws away, and none carries other metrics.
While any picked job has not ended, the page's live region asks `jobs-compare-live` every
POLL_S seconds and is replaced by the same partial the first render used; once every job
has ended that partial stops asking.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.views.decorators.http import require_GET

from apps.accounts.tenancy import membership_for_slug, remember_org
from apps.core.errors import InvalidRequest
from apps.core.template_filters import sci
from apps.jobs import comparison

POLL_S = 5
DEFAULT_METRIC = "loss"
CELL_CHARS = 80


def _metric(result: comparison.Comparison, asked: str | None) -> str | None:
    """The series the chart shows: the one asked for if any job has it, else loss, else
    the first recorded."""
    names = result.metric_names
    for name in (asked, DEFAULT_METRIC):
        if name and name in names:
            return name
    return names[0] if names else None


def config_cell(value: Any) -> dict[str, str]:
    """A configuration value for a table cell: numbers as the job page writes them
    (`sci`: a learning rate reads `3e-3`), lists and dicts as JSON, a long value cut short
    (`full` keeps it whole, for the cell's title)."""
    if value is None:
        full = "—"
    elif isinstance(value, bool):
        full = "true" if value else "false"
    elif isinstance(value, float):
        full = sci(value, 6)  # enough digits that two different rates never read alike
    elif isinstance(value, dict | list):
        full = json.dumps(value, sort_keys=True)
    else:
        full = str(value)
    text = full if len(full) <= CELL_CHARS else full[: CELL_CHARS - 1] + "…"
    return {"text": text, "full": full}


def live_context(result: comparison.Comparison, asked_metric: str | None) -> dict:
    """What the live region renders: the tables, and the chart's points of one metric."""
    metric = _metric(result, asked_metric)
    jobs = [compared.job for compared in result.jobs]
    points = comparison.chart_series(jobs, metric) if metric else {}
    return {
        "result": result,
        "metric": metric,
        "poll_s": POLL_S,
        "chart": {
            "metric": metric,
            "names": result.metric_names,  # the picker's options: a running job adds some
            "jobs": [
                {"id": job.public_id, "name": job.name, "points": points.get(job.pk, [])}
                for job in jobs
            ],
        },
        "difference_rows": [
            (key, [config_cell(values[job.public_id]) for job in jobs])
            for key, values in result.differences.items()
        ],
        "metric_rows": [
            (
                name,
                comparison.goal_of(name),
                [compared.metrics.get(name) for compared in result.jobs],
            )
            for name in result.metric_names
        ],
    }


@login_required
@require_GET
def jobs_compare(request: HttpRequest, org_slug: str) -> HttpResponse:
    membership = membership_for_slug(request.user, org_slug)
    org = membership.organization
    remember_org(request, org)
    context: dict = {"org": org, "membership": membership}
    try:
        ids = comparison.parse_ids(request.GET.getlist("ids"))
    except InvalidRequest as exc:  # the page says what to pick; the lists link back
        context["error"] = str(exc.detail)
        return TemplateResponse(request, "jobs/compare.html", context, status=400)
    result = comparison.compare(org, ids)
    context.update(ids=",".join(ids), **live_context(result, request.GET.get("metric")))
    return TemplateResponse(request, "jobs/compare.html", context)


@login_required
@require_GET
def jobs_compare_live(request: HttpRequest, org_slug: str) -> HttpResponse:
    """The live region again, for the page's poll and its metric picker."""
    membership = membership_for_slug(request.user, org_slug)
    org = membership.organization
    try:
        ids = comparison.parse_ids(request.GET.getlist("ids"))
    except InvalidRequest as exc:
        return HttpResponse(str(exc.detail), status=400, content_type="text/plain")
    result = comparison.compare(org, ids)
    context = {
        "org": org,
        "ids": ",".join(ids),
        **live_context(result, request.GET.get("metric")),
    }
    return TemplateResponse(request, "jobs/partials/compare_live.html", context)
