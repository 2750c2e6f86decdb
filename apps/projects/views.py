"""Project pages: the list, the create form and a project's page with its Jobs tab."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse

from apps.accounts.errors import InvalidRequest
from apps.accounts.models import Role
from apps.accounts.tenancy import membership_for_slug, remember_org
from apps.core.pagination import PageRequest, parse_page_request
from apps.jobs.selectors import job_list
from apps.jobs.states import JobState
from apps.projects import services
from apps.projects.forms import DatasetUploadForm, ProjectForm
from apps.projects.models import Dataset, Project


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


JOBS_PER_PAGE = 25


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
    return TemplateResponse(request, "projects/project_detail.html", context)


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


@login_required
def project_datasets(request: HttpRequest, org_slug: str, project_slug: str) -> HttpResponse:
    """The project's datasets and, for members, the upload form. Each file is checked row by
    row before it is stored; a bad file re-renders the form with the error at the File field."""
    membership = membership_for_slug(request.user, org_slug)
    project = get_object_or_404(Project.objects.for_org(membership.organization), slug=project_slug)
    can_write = membership.can(Role.MEMBER)
    if request.method == "POST" and not can_write:
        raise PermissionDenied("Viewers cannot upload datasets.")
    form = DatasetUploadForm(request.POST or None, request.FILES or None) if can_write else None
    if request.method == "POST" and form.is_valid():
        try:
            dataset = services.dataset_upload(
                project=project,
                name=form.cleaned_data["name"],
                upload=form.cleaned_data["file"],
                dataset_format=form.cleaned_data["dataset_format"],
                uploaded_by=request.user,
            )
        except services.DatasetInvalid as error:
            form.add_error("file", str(error))
        else:
            return redirect(
                "project-dataset",
                org_slug=org_slug,
                project_slug=project.slug,
                dataset_id=dataset.public_id,
            )
    context = {
        "org": membership.organization,
        "membership": membership,
        "project": project,
        "datasets": project.datasets.select_related("uploaded_by"),
        "form": form,
        "can_write": can_write,
    }
    return TemplateResponse(request, "projects/dataset_list.html", context)


@login_required
def project_dataset(
    request: HttpRequest, org_slug: str, project_slug: str, dataset_id: str
) -> HttpResponse:
    """One dataset: its id (what a fine-tune names it by) and its first rows as the trainer
    will see them."""
    membership = membership_for_slug(request.user, org_slug)
    project = get_object_or_404(Project.objects.for_org(membership.organization), slug=project_slug)
    dataset = get_object_or_404(Dataset.objects.filter(project=project), public_id=dataset_id)
    try:
        preview, preview_error = services.dataset_preview(dataset), None
    except (OSError, ValueError, services.DataError) as error:  # the file moved or changed
        preview, preview_error = [], str(error)
    context = {
        "org": membership.organization,
        "membership": membership,
        "project": project,
        "dataset": dataset,
        "preview": preview,
        "preview_error": preview_error,
    }
    return TemplateResponse(request, "projects/dataset_detail.html", context)
