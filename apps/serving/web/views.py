"""The endpoint pages: the organization's endpoints, and one endpoint's page with its state,
revisions, promotions, usage and ready-to-copy snippets; Swap, Rollback and Stop as plain
POST forms that call the service and come back to the page (a refused write is a message,
never an error page). Any member sees them; viewers may not write (403, as Cancel on a job
page). Another organization's endpoint is a 404. The detail page is live over
`ws/endpoints/<ep_id>/` (`apps.serving.consumers`) and whole without a websocket."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.views.decorators.http import require_GET, require_POST

from apps.accounts.models import Membership, Role
from apps.accounts.tenancy import membership_for_slug, remember_org
from apps.core.errors import ApiError
from apps.projects.models import Project
from apps.serving import selectors, services
from apps.serving.models import Endpoint
from apps.serving.web import partials


def _endpoint_for(
    request: HttpRequest, org_slug: str, endpoint_id: str
) -> tuple[Membership, Endpoint]:
    membership = membership_for_slug(request.user, org_slug)
    endpoint = partials.endpoint_for_page(membership.organization, endpoint_id)
    if endpoint is None:
        raise Http404("No such endpoint.")
    return membership, endpoint


def _writer(request: HttpRequest, org_slug: str, endpoint_id: str) -> Endpoint:
    membership, endpoint = _endpoint_for(request, org_slug, endpoint_id)
    if not membership.can(Role.MEMBER):
        raise PermissionDenied("Viewers cannot change endpoints.")
    return endpoint


def public_url(request: HttpRequest) -> str:
    """Where clients reach Trainyard: `TRAINYARD_PUBLIC_URL`, else this request's host."""
    configured = getattr(settings, "TRAINYARD_PUBLIC_URL", "") or request.build_absolute_uri("/")
    return configured.rstrip("/")


@login_required
@require_GET
def endpoint_list(request: HttpRequest, org_slug: str) -> HttpResponse:
    membership = membership_for_slug(request.user, org_slug)
    org = membership.organization
    remember_org(request, org)
    rows = [
        (endpoint, selectors.endpoint_state(endpoint))
        for endpoint in partials.endpoints_for_list(org)
    ]
    context = {
        "org": org,
        "membership": membership,
        "rows": rows,
        "public_url": public_url(request),
        "can_write": membership.can(Role.MEMBER),
        # New endpoint: an endpoint is deployed from a project's Playground.
        "projects": list(Project.objects.for_org(org).order_by("name")[:50]),
    }
    return TemplateResponse(request, "serving/list.html", context)


@login_required
@require_GET
def endpoint_detail(request: HttpRequest, org_slug: str, endpoint_id: str) -> HttpResponse:
    membership, endpoint = _endpoint_for(request, org_slug, endpoint_id)
    remember_org(request, membership.organization)
    can_write = membership.can(Role.MEMBER)
    context = {
        **partials.live_context(endpoint),
        "membership": membership,
        "can_write": can_write,
        "targets": partials.swap_targets(endpoint) if can_write else [],
        "usage": partials.usage(endpoint),
        "public_url": public_url(request),
    }
    return TemplateResponse(request, "serving/detail.html", context)


def _back(org_slug: str, endpoint_id: str) -> HttpResponse:
    return redirect("endpoint-detail", org_slug=org_slug, endpoint_id=endpoint_id)


@login_required
@require_POST
def endpoint_swap(request: HttpRequest, org_slug: str, endpoint_id: str) -> HttpResponse:
    """A new revision serving the chosen artifact; it goes live once loaded and tested."""
    endpoint = _writer(request, org_slug, endpoint_id)
    target = request.POST.get("target", "").strip()
    if not target:
        messages.error(request, "Choose an adapter or checkpoint to serve.")
        return _back(org_slug, endpoint_id)
    try:
        revision = services.endpoint_set_target(
            endpoint=endpoint, target={"artifact": target}, who=services.Who(user=request.user)
        )
    except ApiError as exc:
        messages.error(request, str(exc.detail))
    else:
        messages.success(
            request,
            f"Revision {revision.label} is loading; it goes live once loaded and smoke-tested.",
        )
    return _back(org_slug, endpoint_id)


@login_required
@require_POST
def endpoint_rollback(request: HttpRequest, org_slug: str, endpoint_id: str) -> HttpResponse:
    endpoint = _writer(request, org_slug, endpoint_id)
    try:
        rolled = services.endpoint_rollback(endpoint=endpoint, who=services.Who(user=request.user))
    except ApiError as exc:
        messages.error(request, str(exc.detail))
    else:
        label = rolled.current_revision.label if rolled.current_revision else "?"
        messages.success(request, f"Rolled back: {label} answers now.")
    return _back(org_slug, endpoint_id)


@login_required
@require_POST
def endpoint_stop(request: HttpRequest, org_slug: str, endpoint_id: str) -> HttpResponse:
    endpoint = _writer(request, org_slug, endpoint_id)
    try:
        services.endpoint_stop(endpoint=endpoint)
    except ApiError as exc:
        messages.error(request, str(exc.detail))
    else:
        messages.success(request, "The endpoint is stopped; its serve job ends and billing stops.")
    return _back(org_slug, endpoint_id)
