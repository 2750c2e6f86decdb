"""What the New Job page needs of jobs: submitting a job form, and the live quote its
accelerator and GPU-count selects ask for with htmx. The page itself, which also holds the
fine-tune form, is `apps.finetunes.views.job_new`."""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from apps.accounts.models import Organization, User
from apps.accounts.tenancy import membership_for_slug
from apps.catalog.models import Accelerator
from apps.core.errors import ApiError
from apps.core.money import format_usd
from apps.jobs import services
from apps.jobs.execution import placement
from apps.jobs.models import Job
from apps.jobs.web.forms import JobForm
from apps.projects.models import Project


@dataclass(frozen=True)
class QuoteShown:
    """What the quote partial shows: a `problem` with the selection, or availability and
    the hourly price range of the whole job."""

    problem: str | None = None
    available: bool = False
    accelerator: str = ""
    gpu_count: int | None = None
    price: str | None = None


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
    result = placement.quote(accelerator=chosen.name, gpu_count=count)
    price = None
    if result.available:
        low, high = format_usd(result.price_min_micros_hr), format_usd(result.price_max_micros_hr)
        price = f"{low}\N{EN DASH}{high} / h"
    return QuoteShown(
        available=result.available, accelerator=chosen.display_name, gpu_count=count, price=price
    )


def form_quote(form: JobForm) -> QuoteShown:
    return quote_shown(form["accelerator"].value(), form["gpu_count"].value())


def submit(
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
    except ApiError as error:  # a bad field, or a limit such as waiting_jobs_limit
        form.add_service_error(error)
        return None
    return created.job


@never_cache  # a live observation: a cached answer would be a wrong one
@login_required
@require_GET
def job_quote(request: HttpRequest, org_slug: str) -> HttpResponse:
    """The quote partial for `accelerator` and `gpu_count`, swapped into the page by htmx.
    Readable by viewers too, as the quote API is: it reserves nothing."""
    membership_for_slug(request.user, org_slug)
    shown = quote_shown(request.GET.get("accelerator", ""), request.GET.get("gpu_count"))
    return TemplateResponse(request, "jobs/partials/quote.html", {"quote": shown})
