"""The Billing page: the organization's balance, budgets, spend per day and the transfers
of its wallet. Any member may see it (viewers too); it shows only the current
organization's rows. Admins and owners also get the budget editor
(`apps.billing.web.budgets`); others see the budgets without its controls. Live over
`ws/billing/<org>/` (`apps.billing.consumers`), and whole without a websocket: a reload
renders everything."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.views.decorators.http import require_GET

from apps.accounts import views as account_views
from apps.accounts.models import Membership, Role
from apps.accounts.tenancy import default_membership, membership_for_slug, remember_org
from apps.billing import selectors
from apps.billing.web import partials
from apps.billing.web.forms import BudgetForm
from apps.core.errors import InvalidRequest
from apps.core.pagination import PageRequest, parse_page_request

TRANSFERS_PER_PAGE = 25


def _transfers_page(request: HttpRequest, organization_id: int):
    """One page of wallet transfers, newest first; a stale or hand-edited cursor shows the
    newest instead of an error page."""
    try:
        after = parse_page_request(request.GET).after
    except InvalidRequest:
        after = None
    return selectors.wallet_transfers_page(
        organization_id, PageRequest(limit=TRANSFERS_PER_PAGE, after=after, descending=True)
    )


def page_response(
    request: HttpRequest,
    membership: Membership,
    *,
    budget_form: BudgetForm | None = None,
    status: int = 200,
) -> HttpResponse:
    """The whole page; `budget_form` is a refused new-budget form to show with its errors."""
    org = membership.organization
    can_manage = membership.can(Role.ADMIN)
    remember_org(request, org)
    lines, next_cursor = _transfers_page(request, org.pk)
    context = {
        **partials.live_context(org.pk),
        "org": org,
        "membership": membership,
        "notices": partials.recent_notices(org.pk),
        "spend": partials.spend_chart(org.pk),
        "lines": lines,
        "next_cursor": next_cursor,
        "can_manage": can_manage,
        "budget_list": selectors.budgets_for(org).order_by("project__name", "period", "id"),
        "budget_form": (budget_form or BudgetForm(organization=org)) if can_manage else None,
    }
    return TemplateResponse(request, "billing/page.html", context, status=status)


@login_required
@require_GET
def billing_current(request: HttpRequest) -> HttpResponse:
    """`/billing/`: the page of the organization the user is working in (the header, else
    the one last opened, else their first)."""
    membership = default_membership(request, request.user)
    if membership is None:
        return account_views.no_organization(request)
    return page_response(request, membership)


@login_required
@require_GET
def billing_page(request: HttpRequest, org_slug: str) -> HttpResponse:
    return page_response(request, membership_for_slug(request.user, org_slug))


@login_required
@require_GET
def billing_transfers(request: HttpRequest, org_slug: str) -> HttpResponse:
    """The next page of transfers as table rows (the "Older" button swaps them in)."""
    membership = membership_for_slug(request.user, org_slug)
    lines, next_cursor = _transfers_page(request, membership.organization.pk)
    context = {"org": membership.organization, "lines": lines, "next_cursor": next_cursor}
    return TemplateResponse(request, "billing/partials/transfer_rows.html", context)
