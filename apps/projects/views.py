"""Project pages: the list and the create form. A project's own page, with its Jobs tab, is
`apps.jobs.web.views.project_detail` (with `templates/jobs/project_detail.html`); its datasets
are `apps.finetunes.views`."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.template.response import TemplateResponse

from apps.accounts.models import Role
from apps.accounts.tenancy import membership_for_slug, remember_org
from apps.projects import services
from apps.projects.forms import ProjectForm
from apps.projects.models import Project


@login_required
def project_list(request: HttpRequest, org_slug: str) -> HttpResponse:
    membership = membership_for_slug(request.user, org_slug)
    remember_org(request, membership.organization)
    projects = Project.objects.for_org(membership.organization).order_by("name")
    context = {
        "org": membership.organization,
        "membership": membership,
        "projects": projects,
        "can_create": membership.can(Role.MEMBER),
    }
    return TemplateResponse(request, "projects/project_list.html", context)


@login_required
def project_create(request: HttpRequest, org_slug: str) -> HttpResponse:
    membership = membership_for_slug(request.user, org_slug)
    if not membership.can(Role.MEMBER):
        raise PermissionDenied("Viewers cannot create projects.")
    form = ProjectForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            project = services.project_create(
                organization=membership.organization, created_by=request.user, **form.cleaned_data
            )
        except services.ProjectSlugTaken:
            form.add_error("slug", "A project with this slug already exists.")
        else:
            return redirect("project-detail", org_slug=org_slug, project_slug=project.slug)
    context = {"org": membership.organization, "membership": membership, "form": form}
    return TemplateResponse(request, "projects/project_form.html", context)
