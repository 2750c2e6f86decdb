"""Pages for signing in, choosing an organization and managing its API keys."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.templatetags.static import static
from django.views.decorators.http import require_GET, require_POST

from apps.accounts import services, storage
from apps.accounts.forms import ApiKeyCreateForm
from apps.accounts.models import ApiKey, Role
from apps.accounts.tenancy import default_membership, membership_for_slug, remember_org


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness for load balancers and compose: the database answers a query."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return JsonResponse({"status": "ok"})


def no_organization(request: HttpRequest) -> HttpResponse:
    """What a signed-in user who belongs to no organization sees, on any page that needs one."""
    return TemplateResponse(request, "accounts/no_org.html")


@require_GET
def favicon(request: HttpRequest) -> HttpResponse:
    """`/favicon.ico`, which browsers and tools ask for on their own: the site's icon (pages
    name it in their head; this spares every other client a 404)."""
    return redirect(static("favicon.svg"), permanent=True)


@login_required
def home(request: HttpRequest) -> HttpResponse:
    membership = default_membership(request, request.user)
    if membership is None:
        return no_organization(request)
    return redirect("overview", org_slug=membership.organization.slug)


@login_required
@require_POST
def switch_org(request: HttpRequest) -> HttpResponse:
    membership = membership_for_slug(request.user, request.POST.get("org", ""))
    remember_org(request, membership.organization)
    return redirect("overview", org_slug=membership.organization.slug)


@login_required
def org_settings(request: HttpRequest, org_slug: str) -> HttpResponse:
    membership = membership_for_slug(request.user, org_slug)
    org = membership.organization
    remember_org(request, org)
    can_manage = membership.can(Role.ADMIN)
    form = ApiKeyCreateForm(max_role=membership.role, organization=org) if can_manage else None
    new_key = None
    if request.method == "POST":
        if not can_manage:
            raise PermissionDenied("Only admins and owners manage API keys.")
        form = ApiKeyCreateForm(request.POST, max_role=membership.role, organization=org)
        if form.is_valid():
            _, new_key = services.api_key_create(
                organization=org,
                name=form.cleaned_data["name"],
                role=form.cleaned_data["role"],
                created_by=request.user,
            )
            form = ApiKeyCreateForm(max_role=membership.role, organization=org)
    context = {
        "org": org,
        "membership": membership,
        "can_manage": can_manage,
        "form": form,
        "new_key": new_key,
        "keys": ApiKey.objects.filter(organization=org).select_related("created_by"),
        "storage": storage.storage_usage(org),
        "workdir_retention_days": settings.WORKDIR_RETENTION_DAYS,
    }
    return TemplateResponse(request, "accounts/org_settings.html", context)


@login_required
@require_POST
def api_key_revoke(request: HttpRequest, org_slug: str, key_id: int) -> HttpResponse:
    membership = membership_for_slug(request.user, org_slug)
    key = get_object_or_404(ApiKey, pk=key_id, organization=membership.organization)
    if not membership.can(Role.ADMIN):
        raise PermissionDenied("Only admins and owners manage API keys.")
    services.api_key_revoke(key=key)
    return redirect("org-settings", org_slug=org_slug)
