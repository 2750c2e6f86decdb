"""Job pages: a project's page with its Jobs tab, the job detail page, its catch-up and
older-logs fragments, and Cancel.

The project page's URL names projects, but the page is its list of jobs, and `projects` sits
below `jobs` and cannot read them: so its view is here and its template is
`jobs/project_detail.html`."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import FileResponse, Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.http.request import split_domain_port
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.views.decorators.http import require_GET, require_POST

from apps.accounts.models import Role
from apps.accounts.tenancy import membership_for_slug, remember_org
from apps.core.errors import ApiError, InvalidRequest
from apps.core.pagination import PageRequest, parse_page_request
from apps.jobs import services
from apps.jobs.artifacts.files import artifact_response
from apps.jobs.live import partials
from apps.jobs.models import Artifact, Job
from apps.jobs.selectors import job_list
from apps.jobs.shell.hostkey import gateway_host_key
from apps.jobs.states import TERMINAL_STATES, JobState
from apps.jobs.telemetry.log_text import log_text_response
from apps.projects.models import Project


def _job_for(request: HttpRequest, org_slug: str, job_id: str):
    membership = membership_for_slug(request.user, org_slug)
    job = Job.objects.for_org(membership.organization).filter(public_id=job_id).first()
    if job is None:
        raise Http404("No such job.")
    return membership, partials.job_for_push(job.pk)


def _int_param(request: HttpRequest, name: str) -> int:
    try:
        return max(0, int(request.GET.get(name, 0)))
    except ValueError:
        return 0


@login_required
@require_GET
def job_detail(request: HttpRequest, org_slug: str, job_id: str) -> HttpResponse:
    membership, job = _job_for(request, org_slug, job_id)
    remember_org(request, membership.organization)
    context = {
        **partials.render_page_context(job),
        "org": membership.organization,
        "membership": membership,
        "can_write": membership.can(Role.MEMBER),
        "connect": _connect(request, job, membership),
        # A server (an endpoint's, the Playground's) is started again by what it serves.
        "can_rerun": job.kind in RERUNNABLE_KINDS,
        "rerun_key": uuid.uuid4().hex,  # one "Run again" per page view, however many clicks
        "reruns": list(job.reruns.order_by("created_at", "id").only("public_id")),
    }
    return TemplateResponse(request, "jobs/detail.html", context)


def _connect(request: HttpRequest, job: Job, membership) -> dict | None:
    """The Connect panel of a job that has not ended (None for one that has): the SSH
    command where the gateway runs (SSH_GATEWAY_HOST, else the host this page was asked
    for), its host key, and whether this person may open the terminal (members, not
    viewers). The page shows the panel while the job runs."""
    if job.state in TERMINAL_STATES:
        return None
    ssh = None
    if settings.SSH_GATEWAY_PORT:
        # The host name without port or IPv6 brackets, as the API's `ssh` object gives it.
        host = settings.SSH_GATEWAY_HOST or split_domain_port(request.get_host())[0].strip("[]")
        ssh = {
            "command": f"ssh -p {settings.SSH_GATEWAY_PORT} {job.public_id}@{host}",
            "fingerprint": gateway_host_key().fingerprint,
        }
    return {
        "running": job.state == JobState.RUNNING,
        "ssh": ssh,
        "can_open": membership.can(Role.MEMBER),
    }


@login_required
@require_GET
def job_live(request: HttpRequest, org_slug: str, job_id: str) -> HttpResponse:
    """What a page missed: every partial newer than the ids it holds."""
    _, job = _job_for(request, org_slug, job_id)
    html = partials.render_catch_up(
        job,
        after_event=_int_param(request, "after_event"),
        after_log=_int_param(request, "after_log"),
        after_metric=_int_param(request, "after_metric"),
    )
    return HttpResponse(html)


@login_required
@require_GET
def job_logs_older(request: HttpRequest, org_slug: str, job_id: str) -> HttpResponse:
    membership, job = _job_for(request, org_slug, job_id)
    lines = partials.older_logs(job, _int_param(request, "before"))
    has_more = bool(lines) and partials.has_older_logs(job, lines[0])
    context = {"org": membership.organization, "job": job, "lines": lines, "has_more": has_more}
    return TemplateResponse(request, "jobs/logs_older.html", context)


@login_required
@require_GET
def job_log_download(request: HttpRequest, org_slug: str, job_id: str) -> StreamingHttpResponse:
    """The whole log as a plain-text file: what the API's `logs.txt` serves, streamed."""
    _, job = _job_for(request, org_slug, job_id)
    response = log_text_response(request, job, None)
    response["Content-Disposition"] = f'attachment; filename="{job.public_id}.log"'
    return response


@login_required
@require_POST
def job_cancel(request: HttpRequest, org_slug: str, job_id: str) -> HttpResponse:
    membership, job = _job_for(request, org_slug, job_id)
    if not membership.can(Role.MEMBER):
        raise PermissionDenied("Viewers cannot terminate jobs.")
    services.job_terminate(job=job)
    if request.htmx:
        return HttpResponse(status=204)
    return redirect("job-detail", org_slug=org_slug, job_id=job_id)


@login_required
@require_POST
def job_rerun(request: HttpRequest, org_slug: str, job_id: str) -> HttpResponse:
    """ "Run again": a new job made as this one was, linked to it; then its page. The page's
    form carries a key of its own, so a double click makes one job."""
    membership, job = _job_for(request, org_slug, job_id)
    if not membership.can(Role.MEMBER):
        raise PermissionDenied("Viewers cannot run jobs.")
    key = request.POST.get("idempotency_key", "")[:64]
    try:
        created = services.job_rerun(
            job=job,
            overrides={},
            idempotency_key=f"web-rerun:{key}" if key else None,
            created_by=request.user,
        )
    except ApiError as error:  # e.g. compute switched off, a budget, the waiting limit
        messages.error(request, f"Could not run it again: {error.detail}")
        return redirect("job-detail", org_slug=org_slug, job_id=job_id)
    return redirect("job-detail", org_slug=org_slug, job_id=created.job.public_id)


@login_required
@require_GET
def job_artifact_download(
    request: HttpRequest, org_slug: str, job_id: str, artifact_id: int
) -> FileResponse:
    _, job = _job_for(request, org_slug, job_id)
    artifact = get_object_or_404(Artifact, pk=artifact_id, job=job)
    return artifact_response(artifact, job)


JOBS_PER_PAGE = 25
RERUNNABLE_KINDS = frozenset({Job.Kind.CONTAINER, Job.Kind.FINETUNE})


@login_required
def project_detail(request: HttpRequest, org_slug: str, project_slug: str) -> HttpResponse:
    """The project page and its Jobs tab: newest first, filtered by state, cursor-paged, and
    live over the project's websocket (new jobs and state changes appear in place)."""
    membership = membership_for_slug(request.user, org_slug)
    project = get_object_or_404(Project.objects.for_org(membership.organization), slug=project_slug)
    state = request.GET.get("state")
    if state not in JobState.values:
        state = None
    jobs, next_cursor, total = _jobs_page(request, membership, project, state)
    context = {
        "org": membership.organization,
        "membership": membership,
        "project": project,
        "jobs": jobs,
        "next_cursor": next_cursor,
        "total": total,
        "state": state,
        "state_choices": JobState.choices,
        "can_write": membership.can(Role.MEMBER),
    }
    return TemplateResponse(request, "jobs/project_detail.html", context)


def _jobs_page(request: HttpRequest, membership, project: Project, state: str | None):
    first = PageRequest(limit=JOBS_PER_PAGE, after=None, descending=True)
    try:
        after = parse_page_request(request.GET, key_length=2).after
        return job_list(
            membership.organization,
            PageRequest(JOBS_PER_PAGE, after, True),
            project_id=project.public_id,
            state=state,
        )
    except InvalidRequest:  # a stale or hand-edited cursor: show the newest jobs instead
        return job_list(membership.organization, first, project_id=project.public_id, state=state)
