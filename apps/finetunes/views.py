"""Fine-tune pages: a project's datasets (list, upload, one dataset's preview). The fine-tune
form's tab on the New Job page (`apps.jobs.web.new_job`) comes from `apps.finetunes.forms`,
named by the fine-tune kind's `form_class`."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse

from apps.accounts.models import Role
from apps.accounts.storage import QuotaExceeded
from apps.accounts.tenancy import membership_for_slug
from apps.finetunes import services
from apps.finetunes.forms import DatasetUploadForm
from apps.finetunes.models import Dataset
from apps.projects.models import Project


@login_required
def project_datasets(request: HttpRequest, org_slug: str, project_slug: str) -> HttpResponse:
    """The project's datasets and, for members, the upload form. Each file is checked row by
    row before it is stored; a bad file re-renders the form with the error at the File field,
    answered 400 (413 for a file over the size limit) so a script or a test sees the refusal."""
    membership = membership_for_slug(request.user, org_slug)
    project = get_object_or_404(Project.objects.for_org(membership.organization), slug=project_slug)
    can_write = membership.can(Role.MEMBER)
    if request.method == "POST" and not can_write:
        raise PermissionDenied("Viewers cannot upload datasets.")
    form = DatasetUploadForm(request.POST or None, request.FILES or None) if can_write else None
    status = 200
    if request.method == "POST" and not form.is_valid():
        status = 400
    elif request.method == "POST":
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
            status = 413 if isinstance(error, services.DatasetTooLarge) else 400
        except QuotaExceeded as error:
            form.add_error("file", str(error.detail))
            status = 413
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
    return TemplateResponse(request, "finetunes/dataset_list.html", context, status=status)


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
    return TemplateResponse(request, "finetunes/dataset_detail.html", context)
