"""Pages for signing in, choosing an organization and managing its API keys, and each
member's own SSH keys for that organization (the "Your SSH keys" section of its settings:
htmx swaps the section in place; without JavaScript the forms post and redirect back)."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db import connection
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.templatetags.static import static
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from apps.accounts import services, storage
from apps.accounts.forms import ApiKeyCreateForm, SshKeyAddForm
from apps.accounts.models import ApiKey, Membership, Role, SshKey
from apps.accounts.ssh_keys import SESSION_ROLES
from apps.accounts.tenancy import default_membership, membership_for_slug, remember_org
from apps.core.errors import InvalidRequest, NotFound


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
    form = ApiKeyCreateForm(max_role=membership.role) if can_manage else None
    new_key = None
    if request.method == "POST":
        if not can_manage:
            raise PermissionDenied("Only admins and owners manage API keys.")
        form = ApiKeyCreateForm(request.POST, max_role=membership.role)
        if form.is_valid():
            try:
                _, new_key = services.api_key_create(
                    organization=org,
                    name=form.cleaned_data["name"],
                    role=form.cleaned_data["role"],
                    created_by=request.user,
                )
            except InvalidRequest as exc:
                form.add_error("name" if exc.param == "name" else None, str(exc.detail))
            else:
                form = ApiKeyCreateForm(max_role=membership.role)
        if form.errors:
            return _settings_page(request, membership, form=form, status=400)
    return _settings_page(request, membership, form=form, new_key=new_key)


def _settings_page(
    request: HttpRequest,
    membership: Membership,
    *,
    form: ApiKeyCreateForm | None,
    new_key: str | None = None,
    ssh_form: SshKeyAddForm | None = None,
    status: int = 200,
) -> TemplateResponse:
    org = membership.organization
    context = {
        "org": org,
        "membership": membership,
        "can_manage": membership.can(Role.ADMIN),
        "form": form,
        "new_key": new_key,
        "keys": ApiKey.objects.filter(organization=org).select_related("created_by"),
        "storage": storage.storage_usage(org),
        "workdir_retention_days": settings.WORKDIR_RETENTION_DAYS,
        **_ssh_keys_context(request, membership, ssh_form),
    }
    return TemplateResponse(request, "accounts/org_settings.html", context, status=status)


def _ssh_keys_context(
    request: HttpRequest, membership: Membership, form: SshKeyAddForm | None = None
) -> dict:
    """What the "Your SSH keys" section shows: the signed-in member's keys for this
    organization only, whoever else has keys here."""
    return {
        "org": membership.organization,
        "membership": membership,
        "ssh_keys": SshKey.objects.filter(organization=membership.organization, user=request.user),
        "ssh_form": form or SshKeyAddForm(),
        "can_open_sessions": membership.role in SESSION_ROLES,
        "ssh_gateway_enabled": bool(settings.SSH_GATEWAY_PORT),
    }


def _ssh_keys_answer(
    request: HttpRequest, membership: Membership, form: SshKeyAddForm | None = None
) -> HttpResponse:
    """The section alone for htmx; the settings page again otherwise (with the form and its
    errors when there are some, else by redirect)."""
    if request.htmx:
        return TemplateResponse(
            request, "accounts/_ssh_keys.html", _ssh_keys_context(request, membership, form)
        )
    if form is not None and form.errors:
        can_manage = membership.can(Role.ADMIN)
        api_form = ApiKeyCreateForm(max_role=membership.role) if can_manage else None
        return _settings_page(request, membership, form=api_form, ssh_form=form)
    return redirect(
        reverse("org-settings", kwargs={"org_slug": membership.organization.slug}) + "#ssh-keys"
    )


@login_required
@require_POST
def ssh_key_add(request: HttpRequest, org_slug: str) -> HttpResponse:
    """Register a key for the signed-in member (any role: the page tells viewers that the
    gateway will not let them in)."""
    membership = membership_for_slug(request.user, org_slug)
    form = SshKeyAddForm(request.POST)
    if form.is_valid():
        try:
            services.ssh_key_add(
                organization=membership.organization,
                user=request.user,
                public_key=form.cleaned_data["public_key"],
                name=form.cleaned_data["name"],
            )
        except InvalidRequest as exc:
            form.add_error(exc.param if exc.param in form.fields else None, str(exc.detail))
        else:
            form = None
    return _ssh_keys_answer(request, membership, form)


@login_required
@require_POST
def ssh_key_remove(request: HttpRequest, org_slug: str, key_id: int) -> HttpResponse:
    """Delete one of the signed-in member's keys; anyone else's key is a 404."""
    membership = membership_for_slug(request.user, org_slug)
    try:
        services.ssh_key_remove(
            organization=membership.organization, user=request.user, key_id=key_id
        )
    except NotFound as exc:
        raise Http404("No such SSH key.") from exc
    return _ssh_keys_answer(request, membership)


@login_required
@require_POST
def api_key_revoke(request: HttpRequest, org_slug: str, key_id: int) -> HttpResponse:
    membership = membership_for_slug(request.user, org_slug)
    key = get_object_or_404(ApiKey, pk=key_id, organization=membership.organization)
    if not membership.can(Role.ADMIN):
        raise PermissionDenied("Only admins and owners manage API keys.")
    services.api_key_revoke(key=key)
    return redirect("org-settings", org_slug=org_slug)
