"""The New Job page: one tab a form, submitting it, and the live quote its accelerator and
GPU-count selects ask for with htmx.

The page shows a form for each job kind that supplies one (`JobKind.form_class`, a dotted
path: the fine-tune form lives in `apps.finetunes`, above `jobs`), then the container form,
which is jobs' own. Every form posts to the page's own URL with a hidden `form` naming which;
on success the browser goes to the new job's page, otherwise the page comes back with the
errors next to their fields. Without JavaScript everything works but the live quote, which
then shows the initial (or last submitted) selection.

Beside the price, the quote says what submitting would hold of the organization's
available balance (`services.hold_for`: two hours at the price ceiling) and whether the
balance covers it, so a 402 at submit is never a surprise."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.module_loading import import_string
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods

from apps.accounts.models import Organization, Role, User
from apps.accounts.tenancy import membership_for_slug
from apps.billing import selectors as billing_selectors
from apps.billing.holds import COVER_HOURS
from apps.catalog.models import Accelerator
from apps.core.errors import ApiError
from apps.core.money import format_usd, format_usd_range, usd_to_micros
from apps.jobs import kinds, services
from apps.jobs.ceilings import BidTooLow, NoPrice
from apps.jobs.execution import placement
from apps.jobs.models import Job
from apps.jobs.web.forms import ContainerJobForm, JobForm
from apps.projects.models import Project
from apps.secrets.models import Secret


@dataclass(frozen=True)
class HoldShown:
    """What submitting would hold (or why it cannot: `problem`, e.g. a ceiling too low), the
    organization's available balance, and whether that falls short."""

    problem: str | None = None
    hold: str | None = None
    available: str | None = None
    short: bool = False
    cover_hours: int = COVER_HOURS


@dataclass(frozen=True)
class QuoteShown:
    """What the quote partial shows: a `problem` with the selection, or availability and
    the hourly price range of the whole job."""

    problem: str | None = None
    available: bool = False
    accelerator: str = ""
    gpu_count: int | None = None
    price: str | None = None
    hold: HoldShown | None = None


def _usd(value: object) -> int | None:
    """A dollar amount as typed into a limit field (blank or unreadable: none)."""
    if value in (None, ""):
        return None
    try:
        amount = Decimal(str(value))
    except InvalidOperation:
        return None
    return usd_to_micros(amount) if amount.is_finite() and amount >= 0 else None


def hold_shown(
    organization: Organization,
    *,
    accelerator: str,
    gpu_count: int,
    priority_class: str | None = None,
    max_price_usd_hr: object = None,
    max_cost_usd: object = None,
) -> HoldShown | None:
    """The hold a job of this selection would place at submit, beside the available
    balance; None when it would hold nothing (no offer prices it, so nothing is known).
    `hold_for` reads only the compute, limits and priority class of the normalised spec, so
    the quote builds just those from what is typed so far."""
    spec = {
        "priority_class": priority_class if priority_class == "preemptible" else "standard",
        "compute": {"accelerator": accelerator, "gpu_count": gpu_count},
        "limits": {
            "max_price_micros_hr": _usd(max_price_usd_hr),
            "max_cost_micros": _usd(max_cost_usd),
        },
    }
    try:
        amount = services.hold_for(spec)
    except (BidTooLow, NoPrice) as error:
        return HoldShown(problem=str(error.detail))
    if amount <= 0:
        return None
    available = billing_selectors.account_summary(organization.pk).available_micros
    return HoldShown(
        hold=format_usd(amount),
        available=format_usd(max(available, 0)),
        short=amount > available,
    )


def quote_shown(
    accelerator: str,
    gpu_count: str | int | None,
    *,
    organization: Organization | None = None,
    priority_class: str | None = None,
    max_price_usd_hr: object = None,
    max_cost_usd: object = None,
) -> QuoteShown:
    """The quote for a selection as typed, which may name no accelerator or a count it does
    not come in: those are answers for the person choosing, not errors. With the
    organization, it also says what submitting would hold of its balance."""
    chosen = Accelerator.objects.filter(name=accelerator).first() if accelerator else None
    if chosen is None:
        return QuoteShown(problem="Choose an accelerator from the catalog.")
    try:
        count = int(gpu_count)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return QuoteShown(problem="Choose a count.")
    if count not in chosen.gpu_counts:
        counts = ", ".join(str(c) for c in chosen.gpu_counts)
        return QuoteShown(
            problem=f"{chosen.display_name} comes in GPU counts {counts}, not {count}."
        )
    result = placement.quote(accelerator=chosen.name, gpu_count=count)
    price = None
    if result.available:
        price = f"{format_usd_range(result.price_min_micros_hr, result.price_max_micros_hr)} / h"
    hold = None
    if organization is not None:
        hold = hold_shown(
            organization,
            accelerator=chosen.name,
            gpu_count=count,
            priority_class=priority_class,
            max_price_usd_hr=max_price_usd_hr,
            max_cost_usd=max_cost_usd,
        )
    return QuoteShown(
        available=result.available,
        accelerator=chosen.display_name,
        gpu_count=count,
        price=price,
        hold=hold,
    )


def _value(form: JobForm, name: str) -> object:
    return form[name].value() if name in form.fields else None


def form_quote(form: JobForm, organization: Organization | None = None) -> QuoteShown:
    return quote_shown(
        form["accelerator"].value(),
        form["gpu_count"].value(),
        organization=organization,
        priority_class=_value(form, "priority_class"),
        max_price_usd_hr=_value(form, "max_price_usd_hr"),
        max_cost_usd=_value(form, "max_cost_usd"),
    )


def submit(
    form: JobForm,
    *,
    organization: Organization,
    project: Project,
    user: User,
    rerun_of: Job | None = None,
) -> Job | None:
    """The job the form creates, or None with the reasons added to the form. `rerun_of` is
    the job "Edit and run" started from: the new job links to it."""
    if not form.is_valid():
        return None
    payload = form.payload(project_id=project.public_id)
    if rerun_of is not None:
        payload = form.carry_over(payload, rerun_of)
    try:
        created = services.job_create(
            organization=organization,
            payload=payload,
            idempotency_key=None,
            created_by=user,
            kind=form.kind,
            rerun_of=rerun_of,
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
    membership = membership_for_slug(request.user, org_slug)
    shown = quote_shown(
        request.GET.get("accelerator", ""),
        request.GET.get("gpu_count"),
        organization=membership.organization,
        priority_class=request.GET.get("priority_class"),
        max_price_usd_hr=request.GET.get("max_price_usd_hr"),
        max_cost_usd=request.GET.get("max_cost_usd"),
    )
    return TemplateResponse(request, "jobs/partials/quote.html", {"quote": shown})


@dataclass(frozen=True)
class Tab:
    """One form of the New Job page and the quote shown under its compute choice."""

    form: JobForm
    quote: QuoteShown


def page_forms() -> list[type[JobForm]]:
    """The page's forms, in tab order: each kind's own (`KIND_HOOKS` order), then the
    container form."""
    supplied = [
        import_string(kind.form_class) for kind in kinds.registered_kinds() if kind.form_class
    ]
    return [*supplied, ContainerJobForm]


@login_required
@require_http_methods(["GET", "POST"])
def job_new(request: HttpRequest, org_slug: str, project_slug: str) -> HttpResponse:
    """The page for members (viewers get 403). A POST names its form (`form=<form_id>`); only
    that form is bound, the others render as on a GET."""
    membership = membership_for_slug(request.user, org_slug)
    organization = membership.organization
    project = get_object_or_404(Project.objects.for_org(organization), slug=project_slug)
    if not membership.can(Role.MEMBER):
        raise PermissionDenied("Viewers cannot submit jobs.")

    form_classes = page_forms()
    form_ids = sorted(form_class.form_id for form_class in form_classes)
    submitted = request.POST.get("form") if request.method == "POST" else None
    if request.method == "POST" and submitted not in form_ids:
        named = " or ".join(f"form={form_id}" for form_id in form_ids)
        return HttpResponseBadRequest(f"Say which form: {named}.")
    quote_url = reverse("job-quote", kwargs={"org_slug": organization.slug})
    # "Edit and run": `?from=<job>` prefills its kind's form, which posts it back as
    # `rerun_of`; another organization's job, or one of no form's kind, is a 404.
    source_id = request.POST.get("rerun_of") if submitted else request.GET.get("from")
    source = _source_job(organization, source_id, form_classes) if source_id else None
    forms = [
        form_class.for_page(
            request.POST if submitted == form_class.form_id else None,
            organization=organization,
            project=project,
            quote_url=quote_url,
            initial=form_class.initial_from(source)
            if source is not None and not submitted and source.kind == form_class.kind
            else None,
        )
        for form_class in form_classes
    ]
    if submitted:
        form = next(form for form in forms if form.form_id == submitted)
        job = submit(
            form,
            organization=organization,
            project=project,
            user=request.user,
            rerun_of=source if source is not None and source.kind == form.kind else None,
        )
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
        "tabs": [Tab(form, form_quote(form, organization)) for form in forms],
        "secrets": Secret.objects.for_org(organization).order_by("name").only("name", "keys"),
        "rerun_of": source,
    }
    return TemplateResponse(request, "jobs/new.html", context)


def _source_job(organization: Organization, job_id: str, form_classes: list) -> Job:
    job = Job.objects.for_org(organization).filter(public_id=job_id).first()
    if job is None or job.kind not in {form_class.kind for form_class in form_classes}:
        raise Http404("No such job to edit.")
    return job
