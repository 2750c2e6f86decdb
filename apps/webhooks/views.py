"""The Webhooks settings page of an organization (`/o/<slug>/settings/webhooks/`).

Admins and owners see the webhooks, a form to add one, each one's delivery log and its
buttons (Send test, Enable/Disable, Rotate secret, Delete); a member or viewer sees a line
saying who manages them, and any POST of theirs is 403. Each webhook is a card that htmx
swaps in place (the log polls while a delivery is pending); without JavaScript the forms
post and the page comes back. A new secret is shown once, on the answer that made it.
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.views.decorators.http import require_GET, require_POST

from apps.accounts.models import Membership, Role
from apps.accounts.tenancy import membership_for_slug, remember_org
from apps.core.errors import InvalidRequest
from apps.webhooks import selectors, services
from apps.webhooks.forms import WebhookForm
from apps.webhooks.models import Delivery, Webhook


def _admin_membership(request: HttpRequest, org_slug: str) -> Membership:
    membership = membership_for_slug(request.user, org_slug)
    if not membership.can(Role.ADMIN):
        raise PermissionDenied("Only admins and owners manage webhooks.")
    return membership


def _webhook(membership: Membership, webhook_id: str) -> Webhook:
    webhook = selectors.webhook_for_org(membership.organization, webhook_id)
    if webhook is None:
        raise Http404("No such webhook.")
    return webhook


def _card_context(webhook: Webhook, *, new_secret: str | None = None) -> dict:
    deliveries = selectors.recent_deliveries(webhook)
    return {
        "org": webhook.organization,
        "webhook": webhook,
        "deliveries": deliveries,
        "pending": any(d.status == Delivery.Status.PENDING for d in deliveries),
        "new_secret": new_secret,
    }


def _page(
    request: HttpRequest,
    membership: Membership,
    *,
    form: WebhookForm | None = None,
    created: tuple[Webhook, str] | None = None,
) -> TemplateResponse:
    org = membership.organization
    can_manage = membership.can(Role.ADMIN)
    cards = []
    if can_manage:
        for webhook in selectors.webhooks_for_org(org):
            secret = created[1] if created and created[0].pk == webhook.pk else None
            cards.append(_card_context(webhook, new_secret=secret))
    context = {
        "org": org,
        "membership": membership,
        "can_manage": can_manage,
        "cards": cards,
        "form": form or WebhookForm(),
    }
    return TemplateResponse(request, "webhooks/settings.html", context)


def _card(request: HttpRequest, webhook: Webhook, *, new_secret: str | None = None) -> HttpResponse:
    """The webhook's card for htmx; the page again (by redirect) otherwise."""
    if request.htmx:
        return TemplateResponse(
            request, "webhooks/_webhook.html", _card_context(webhook, new_secret=new_secret)
        )
    if new_secret:  # shown once: render it rather than lose it in a redirect
        membership = membership_for_slug(request.user, webhook.organization.slug)
        return _page(request, membership, created=(webhook, new_secret))
    return redirect("org-webhooks", org_slug=webhook.organization.slug)


@login_required
def webhooks_page(request: HttpRequest, org_slug: str) -> HttpResponse:
    membership = membership_for_slug(request.user, org_slug)
    remember_org(request, membership.organization)
    if request.method != "POST":
        return _page(request, membership)
    membership = _admin_membership(request, org_slug)
    form = WebhookForm(request.POST)
    if not form.is_valid():
        return _page(request, membership, form=form)
    try:
        created = services.webhook_create(
            organization=membership.organization, created_by=request.user, **form.cleaned_data
        )
    except InvalidRequest as exc:
        form.add_error(exc.param if exc.param in form.fields else None, str(exc.detail))
        return _page(request, membership, form=form)
    return _page(request, membership, created=created)


@login_required
@require_GET
def webhook_card(request: HttpRequest, org_slug: str, webhook_id: str) -> HttpResponse:
    """The card alone (what its delivery log polls while a delivery is pending)."""
    webhook = _webhook(_admin_membership(request, org_slug), webhook_id)
    return TemplateResponse(request, "webhooks/_webhook.html", _card_context(webhook))


@login_required
@require_POST
def webhook_test(request: HttpRequest, org_slug: str, webhook_id: str) -> HttpResponse:
    webhook = _webhook(_admin_membership(request, org_slug), webhook_id)
    services.webhook_ping(webhook=webhook)
    return _card(request, webhook)


@login_required
@require_POST
def webhook_toggle(request: HttpRequest, org_slug: str, webhook_id: str) -> HttpResponse:
    webhook = _webhook(_admin_membership(request, org_slug), webhook_id)
    webhook = services.webhook_update(webhook=webhook, enabled=not webhook.enabled)
    return _card(request, webhook)


@login_required
@require_POST
def webhook_rotate(request: HttpRequest, org_slug: str, webhook_id: str) -> HttpResponse:
    webhook = _webhook(_admin_membership(request, org_slug), webhook_id)
    webhook, secret = services.webhook_rotate_secret(webhook=webhook)
    return _card(request, webhook, new_secret=secret)


@login_required
@require_POST
def webhook_delete(request: HttpRequest, org_slug: str, webhook_id: str) -> HttpResponse:
    webhook = _webhook(_admin_membership(request, org_slug), webhook_id)
    services.webhook_delete(webhook=webhook)
    if request.htmx:
        return HttpResponse("")
    return redirect("org-webhooks", org_slug=org_slug)
