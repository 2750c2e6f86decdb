"""Sweep pages: a project's sweeps (one row each: progress and the best trial so far) and
one sweep (its trials, the best highlighted, a link to compare them), the New sweep form
and cancel. The form calls the service the API calls, so it refuses the same things."""

from __future__ import annotations

from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.views.decorators.http import require_POST

from apps.accounts.models import Membership, Role
from apps.accounts.tenancy import membership_for_slug
from apps.core.errors import ApiError, NotFound
from apps.projects.models import Project
from apps.sweeps import selectors, services
from apps.sweeps.forms import SweepForm
from apps.sweeps.selectors import SweepView


def _project(membership: Membership, project_slug: str) -> Project:
    return get_object_or_404(Project.objects.for_org(membership.organization), slug=project_slug)


def _sweep(membership: Membership, project: Project, sweep_id: str) -> SweepView:
    try:
        return selectors.sweep_for_org(membership.organization, sweep_id, project=project)
    except NotFound:
        raise Http404("No such sweep.") from None


def compare_url(org_slug: str, view: SweepView) -> str | None:
    """The compare page of the sweep's trials that have a job, or None with fewer than two."""
    ids = [trial.job_id for trial in view.trials if trial.job_id]
    if len(ids) < 2:
        return None
    page = reverse("jobs-compare", kwargs={"org_slug": org_slug})
    return f"{page}?{urlencode({'ids': ','.join(ids)}, safe=',')}"


@login_required
def project_sweeps(request: HttpRequest, org_slug: str, project_slug: str) -> HttpResponse:
    membership = membership_for_slug(request.user, org_slug)
    project = _project(membership, project_slug)
    context = {
        "org": membership.organization,
        "membership": membership,
        "project": project,
        "sweeps": selectors.sweeps_of_project(project),
        "can_write": membership.can(Role.MEMBER),
    }
    return TemplateResponse(request, "sweeps/sweep_list.html", context)


@login_required
def sweep_new(request: HttpRequest, org_slug: str, project_slug: str) -> HttpResponse:
    """The New sweep form; a refused sweep re-renders it with the error at its field,
    answered 400."""
    membership = membership_for_slug(request.user, org_slug)
    if not membership.can(Role.MEMBER):
        raise PermissionDenied("Viewers cannot start sweeps.")
    project = _project(membership, project_slug)
    form = SweepForm(request.POST or None)
    status = 200
    if request.method == "POST":
        status = 400
        if form.is_valid():
            try:
                created = services.sweep_create(
                    organization=membership.organization,
                    project=project,
                    body=form.body(),
                    created_by=request.user,
                )
            except ApiError as error:
                form.add_api_error(error.param, str(error.detail))
            else:
                return redirect(
                    "sweep-detail",
                    org_slug=org_slug,
                    project_slug=project.slug,
                    sweep_id=created.sweep.public_id,
                )
    context = {"org": membership.organization, "project": project, "form": form}
    return TemplateResponse(request, "sweeps/sweep_form.html", context, status=status)


@login_required
def sweep_detail(
    request: HttpRequest, org_slug: str, project_slug: str, sweep_id: str
) -> HttpResponse:
    membership = membership_for_slug(request.user, org_slug)
    project = _project(membership, project_slug)
    view = _sweep(membership, project, sweep_id)
    context = {
        "org": membership.organization,
        "membership": membership,
        "project": project,
        "view": view,
        "sweep": view.sweep,
        "params": list(view.sweep.params),
        "compare_url": compare_url(org_slug, view),
        "can_write": membership.can(Role.MEMBER),
    }
    return TemplateResponse(request, "sweeps/sweep_detail.html", context)


@login_required
@require_POST
def sweep_cancel(
    request: HttpRequest, org_slug: str, project_slug: str, sweep_id: str
) -> HttpResponse:
    membership = membership_for_slug(request.user, org_slug)
    if not membership.can(Role.MEMBER):
        raise PermissionDenied("Viewers cannot cancel sweeps.")
    project = _project(membership, project_slug)
    services.sweep_cancel(sweep=_sweep(membership, project, sweep_id).sweep)
    return redirect("sweep-detail", org_slug=org_slug, project_slug=project.slug, sweep_id=sweep_id)
