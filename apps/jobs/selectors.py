"""Reads of jobs that are more than a filter: the job list with its counter-based total, and
the pages of logs and events."""

from __future__ import annotations

from django.db.models import Prefetch, Sum
from django.http import Http404

from apps.accounts.models import Organization
from apps.core.errors import InvalidRequest
from apps.core.pagination import PageRequest, created_page, id_page
from apps.jobs.models import Attempt, Job, JobCounter, JobEvent, LogLine
from apps.jobs.states import JobState
from apps.projects.models import Project


def job_for_org(organization: Organization, public_id: str) -> Job:
    """The organization's job, or 404 (the same answer for another org's job)."""
    job = (
        Job.objects.for_org(organization)
        .select_related("project")
        .prefetch_related(attempts_prefetch())
        .filter(public_id=public_id)
        .first()
    )
    if job is None:
        raise Http404("No such job.")
    return job


def attempts_prefetch() -> Prefetch:
    return Prefetch(
        "attempts",
        queryset=Attempt.objects.select_related("provider", "preempted_by").order_by("number"),
    )


def job_list(
    organization: Organization,
    page: PageRequest,
    *,
    project_id: str | None = None,
    state: str | None = None,
) -> tuple[list[Job], str | None, int]:
    """Newest first, keyset-paginated on (created_at, id); `total` from the job counters, so
    neither the page nor the total costs more as the organization's jobs grow."""
    jobs = Job.objects.for_org(organization)
    counters = JobCounter.objects.filter(organization=organization)
    if project_id:
        project = Project.objects.for_org(organization).filter(public_id=project_id).first()
        if project is None:
            raise Http404("No such project.")
        jobs = jobs.filter(project=project)
        counters = counters.filter(project=project)
    if state:
        if state not in JobState.values:
            raise InvalidRequest(f"Unknown state {state!r}.", param="state")
        jobs = jobs.filter(state=state)
        counters = counters.filter(state=state)
    jobs = jobs.select_related("project").prefetch_related(attempts_prefetch())
    rows, next_cursor = created_page(jobs, page)
    total = counters.aggregate(total=Sum("count"))["total"] or 0
    return rows, next_cursor, total


def log_page(
    job: Job, page: PageRequest, *, source: str | None
) -> tuple[list[LogLine], str | None, int]:
    lines = LogLine.objects.filter(job=job)
    if source:
        if source not in LogLine.Source.values:
            raise InvalidRequest("source must be user or system.", param="source")
        lines = lines.filter(source=source)
    rows, next_cursor = id_page(lines, page)
    if source == LogLine.Source.USER:
        total = job.user_log_lines
    elif source == LogLine.Source.SYSTEM:
        total = job.system_log_lines
    else:
        total = job.user_log_lines + job.system_log_lines
    return rows, next_cursor, total


def event_page(job: Job, page: PageRequest) -> tuple[list[JobEvent], str | None, int]:
    rows, next_cursor = id_page(JobEvent.objects.filter(job=job), page)
    return rows, next_cursor, JobEvent.objects.filter(job=job).count()
