"""The organization's overview (its home page) and its all-jobs list (docs/dashboard.md)."""

from __future__ import annotations

from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.views.decorators.http import require_GET

from apps.accounts.models import Membership, Role
from apps.accounts.tenancy import membership_for_slug, remember_org
from apps.core.errors import InvalidRequest
from apps.core.pagination import PageRequest, parse_page_request
from apps.jobs import overview as reads
from apps.jobs.models import Job
from apps.jobs.states import JobState
from apps.projects.models import Project

JOBS_PER_PAGE = 25


@login_required
@require_GET
def overview(request: HttpRequest, org_slug: str) -> HttpResponse:
    membership = membership_for_slug(request.user, org_slug)
    org = membership.organization
    remember_org(request, org)
    context = {
        "org": org,
        "membership": membership,
        "can_write": membership.can(Role.MEMBER),
        "overview": reads.overview(org),
        "projects": list(Project.objects.for_org(org).order_by("name")[:50]),
    }
    return TemplateResponse(request, "jobs/overview.html", context)


@login_required
@require_GET
def org_jobs(request: HttpRequest, org_slug: str) -> HttpResponse:
    """Every job of the organization, newest first, filtered by project, state, kind,
    creator and a name search; the filters and the cursor live in the URL."""
    membership = membership_for_slug(request.user, org_slug)
    org = membership.organization
    remember_org(request, org)
    filters = reads.JobFilters.from_query(request.GET)
    error = ""
    try:
        after = parse_page_request(request.GET, key_length=2).after
    except InvalidRequest:  # a stale or hand-edited cursor: the newest jobs instead
        after = None
    try:
        jobs, next_cursor, total = reads.org_jobs(
            org, PageRequest(JOBS_PER_PAGE, after, True), filters
        )
    except InvalidRequest as exc:  # a creator who is not a member: say so, list nothing
        jobs, next_cursor, total, error = [], None, 0, str(exc.detail)
    query = filters.as_query()
    context = {
        "org": org,
        "membership": membership,
        "can_write": membership.can(Role.MEMBER),
        "jobs": jobs,
        "total": total,
        "filters": filters,
        "filtered": bool(query),
        "error": error,
        "next_url": f"?{urlencode({**query, 'cursor': next_cursor})}" if next_cursor else "",
        "live_query": urlencode(query),
        "projects": list(Project.objects.for_org(org).order_by("name").values_list("slug", "name")),
        "state_choices": JobState.choices,
        "kind_choices": Job.Kind.choices,
        "creators": list(
            Membership.objects.filter(organization=org)
            .order_by("user__username")
            .values_list("user__username", flat=True)
        ),
    }
    return TemplateResponse(request, "jobs/list.html", context)
