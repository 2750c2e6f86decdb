"""The New Job page of a project: a fine-tune form and a container form on one page, and the
live quote their accelerator and GPU-count selects ask for with htmx.

Both forms post to the page's own URL with a hidden `form` naming which; on success the
browser goes to the new job's page, otherwise the page comes back with the errors next to
their fields. Without JavaScript everything works but the quote, which then shows the
initial (or last submitted) selection.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods

from apps.accounts.errors import InvalidRequest
from apps.accounts.models import Organization, Role, User
from apps.accounts.tenancy import membership_for_slug
from apps.catalog import selectors as catalog_selectors
from apps.catalog.models import Accelerator
from apps.core.money import MICROS_PER_USD
from apps.jobs import services
from apps.jobs.demo import demo_finetune_initial
from apps.jobs.forms import ContainerJobForm, FinetuneJobForm, JobForm
from apps.jobs.models import Job
from apps.projects.models import Project
from apps.secrets.models import Secret


@dataclass(frozen=True)
class QuoteShown:
    """What the quote partial shows: a `problem` with the selection, or availability and
    the hourly price range of the whole job."""

    problem: str | None = None
    available: bool = False
    accelerator: str = ""
    gpu_count: int | None = None
    price: str | None = None


def _usd(micros: int) -> str:
    """Dollars with at least two decimals and at most six: $0.10, $2.50, $0.0042."""
    whole, _, fraction = f"{Decimal(micros) / MICROS_PER_USD:.6f}".partition(".")
    return f"${whole}.{fraction.rstrip('0').ljust(2, '0')}"


def quote_shown(accelerator: str, gpu_count: str | int | None) -> QuoteShown:
    """The quote for a selection as typed, which may name no accelerator or a count it does
    not come in: those are answers for the person choosing, not errors."""
    chosen = Accelerator.objects.filter(name=accelerator).first() if accelerator else None
    if chosen is None:
        return QuoteShown(problem="Choose an accelerator from the catalog.")
    try:
        count = int(gpu_count)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return QuoteShown(problem="Choose a GPU count.")
    if count not in chosen.gpu_counts:
        counts = ", ".join(str(c) for c in chosen.gpu_counts)
        return QuoteShown(
            problem=f"{chosen.display_name} comes in GPU counts {counts}, not {count}."
        )
    result = catalog_selectors.quote(accelerator=chosen.name, gpu_count=count)
    price = None
    if result.available:
        low, high = _usd(result.price_min_micros_hr), _usd(result.price_max_micros_hr)
        price = f"{low}\N{EN DASH}{high} / h"
    return QuoteShown(
        available=result.available, accelerator=chosen.display_name, gpu_count=count, price=price
    )


def _form_quote(form: JobForm) -> QuoteShown:
    return quote_shown(form["accelerator"].value(), form["gpu_count"].value())


def _submit(
    form: JobForm, *, organization: Organization, project: Project, user: User
) -> Job | None:
    """The job the form creates, or None with the reasons added to the form."""
    if not form.is_valid():
        return None
    # Fail closed, as the API does (403 tenant_disabled): job_create itself does not check.
    if not organization.compute_enabled:
        form.add_error(None, "Compute is not enabled for this organization yet.")
        return None
    try:
        created = services.job_create(
            organization=organization,
            payload=form.payload(project_id=project.public_id),
            idempotency_key=None,
            created_by=user,
            kind=form.kind,
        )
    except InvalidRequest as error:
        form.add_service_error(error)
        return None
    return created.job


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
        initial=demo_finetune_initial(),
        project=project,
    )
    container_form = ContainerJobForm(
        data=request.POST if submitted == "container" else None,
        organization=organization,
        quote_url=quote_url,
    )
    if submitted:
        form = finetune_form if submitted == "finetune" else container_form
        job = _submit(form, organization=organization, project=project, user=request.user)
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
        "finetune_quote": _form_quote(finetune_form),
        "container_quote": _form_quote(container_form),
        "secrets": Secret.objects.for_org(organization).order_by("name").only("name", "keys"),
    }
    return TemplateResponse(request, "jobs/new.html", context)


@never_cache  # a live observation: a cached answer would be a wrong one
@login_required
@require_GET
def job_quote(request: HttpRequest, org_slug: str) -> HttpResponse:
    """The quote partial for `accelerator` and `gpu_count`, swapped into the page by htmx.
    Readable by viewers too, as the quote API is: it reserves nothing."""
    membership_for_slug(request.user, org_slug)
    shown = quote_shown(request.GET.get("accelerator", ""), request.GET.get("gpu_count"))
    return TemplateResponse(request, "jobs/partials/quote.html", {"quote": shown})
