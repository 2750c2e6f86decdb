"""Fine-tune pages: a project's datasets (list, upload, one dataset's preview) and the New Job
page, which holds the fine-tune form beside the container form.

The New Job page: both forms post to the page's own URL with a hidden `form` naming which; on
success the browser goes to the new job's page, otherwise the page comes back with the errors
next to their fields. Without JavaScript everything works but the live quote, which then
shows the initial (or last submitted) selection.
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from apps.accounts.models import Role
from apps.accounts.storage import QuotaExceeded
from apps.accounts.tenancy import membership_for_slug
from apps.finetunes import services
from apps.finetunes.demo import demo_finetune_initial
from apps.finetunes.forms import DatasetUploadForm, FinetuneJobForm
from apps.finetunes.models import Dataset
from apps.jobs.web import new_job
from apps.jobs.web.forms import ContainerJobForm
from apps.projects.models import Project
from apps.secrets.models import Secret


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
    return TemplateResponse(request, "projects/dataset_list.html", context, status=status)


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


@login_required
@require_http_methods(["GET", "POST"])
def job_new(request: HttpRequest, org_slug: str, project_slug: str) -> HttpResponse:
    membership = membership_for_slug(request.user, org_slug)
    organization = membership.organization
    project = get_object_or_404(Project.objects.for_org(organization), slug=project_slug)
    if not membership.can(Role.MEMBER):
        raise PermissionDenied("Viewers cannot submit jobs.")

    submitted = request.POST.get("form") if request.method == "POST" else None
    if request.method == "POST" and submitted not in ("container", "finetune"):
        return HttpResponseBadRequest("Say which form: form=container or form=finetune.")
    quote_url = reverse("job-quote", kwargs={"org_slug": organization.slug})
    finetune_form = FinetuneJobForm(
        data=request.POST if submitted == "finetune" else None,
        quote_url=quote_url,
        initial=demo_finetune_initial(organization),
        project=project,
    )
    container_form = ContainerJobForm(
        data=request.POST if submitted == "container" else None,
        organization=organization,
        quote_url=quote_url,
    )
    if submitted:
        form = finetune_form if submitted == "finetune" else container_form
        job = new_job.submit(form, organization=organization, project=project, user=request.user)
        if job is not None:
            return redirect(
                reverse(
                    "job-detail", kwargs={"org_slug": organization.slug, "job_id": job.public_id}
                )
            )
        form.focus_first_error()

    context = {
        "org": organization,
        "membership": membership,
        "project": project,
        "finetune_form": finetune_form,
        "container_form": container_form,
        "finetune_quote": new_job.form_quote(finetune_form, organization),
        "container_quote": new_job.form_quote(container_form, organization),
        "secrets": Secret.objects.for_org(organization).order_by("name").only("name", "keys"),
    }
    return TemplateResponse(request, "jobs/new.html", context)
