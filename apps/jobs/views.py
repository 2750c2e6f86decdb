"""Job pages: the job detail page, its catch-up and older-logs fragments, and Cancel."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import FileResponse, Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.views.decorators.http import require_GET, require_POST

from apps.accounts.models import Role
from apps.accounts.tenancy import membership_for_slug, remember_org
from apps.jobs import live, services
from apps.jobs.artifact_files import artifact_response
from apps.jobs.models import Artifact, Job


def _job_for(request: HttpRequest, org_slug: str, job_id: str):
    membership = membership_for_slug(request.user, org_slug)
    job = Job.objects.for_org(membership.organization).filter(public_id=job_id).first()
    if job is None:
        raise Http404("No such job.")
    return membership, live.job_for_push(job.pk)


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
        **live.render_page_context(job),
        "org": membership.organization,
        "membership": membership,
        "can_write": membership.can(Role.MEMBER),
        "cancel_label": "Terminate" if job.kind == Job.Kind.CONTAINER else "Cancel",
    }
    return TemplateResponse(request, "jobs/detail.html", context)


@login_required
@require_GET
def job_live(request: HttpRequest, org_slug: str, job_id: str) -> HttpResponse:
    """What a page missed: every partial newer than the ids it holds."""
    _, job = _job_for(request, org_slug, job_id)
    html = live.render_catch_up(
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
    lines = live.older_logs(job, _int_param(request, "before"))
    has_more = bool(lines) and job.log_lines.filter(id__lt=lines[0].id).exists()
    context = {"org": membership.organization, "job": job, "lines": lines, "has_more": has_more}
    return TemplateResponse(request, "jobs/logs_older.html", context)


@login_required
@require_POST
def job_cancel(request: HttpRequest, org_slug: str, job_id: str) -> HttpResponse:
    membership, job = _job_for(request, org_slug, job_id)
    if not membership.can(Role.MEMBER):
        raise PermissionDenied("Viewers cannot cancel jobs.")
    services.job_terminate(job=job)
    if request.htmx:
        return HttpResponse(status=204)
    return redirect("job-detail", org_slug=org_slug, job_id=job_id)


@login_required
@require_GET
def job_artifact_download(
    request: HttpRequest, org_slug: str, job_id: str, artifact_id: int
) -> FileResponse:
    _, job = _job_for(request, org_slug, job_id)
    artifact = get_object_or_404(Artifact, pk=artifact_id, job=job)
    return artifact_response(artifact, job)
