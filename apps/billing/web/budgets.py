"""The budget editor of the Billing page: create, change and delete the organization's
budgets through the same services as `/api/v1/billing/budgets`.

Admins and owners only: a member's or viewer's POST (or a look at the edit page) is 403, and
the page shows them the budgets without controls. Another organization's budget is a 404.
Plain forms (they work without JavaScript): a refused form comes back as the page with the
error at its field (400); a saved one redirects to the Billing page's budgets."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from apps.accounts.models import Membership, Role
from apps.accounts.tenancy import membership_for_slug
from apps.billing import selectors, services
from apps.billing.models import Budget
from apps.billing.web.forms import BudgetForm
from apps.billing.web.views import page_response
from apps.core.errors import ApiError, NotFound
from apps.core.money import usd_to_micros

# The API's names for the service's `param`s, as the form's fields.
_FIELD_OF_PARAM = {"limit_usd": "limit_usd", "project": "project"}


def _admin_membership(request: HttpRequest, org_slug: str) -> Membership:
    membership = membership_for_slug(request.user, org_slug)
    if not membership.can(Role.ADMIN):
        raise PermissionDenied("Only admins and owners manage budgets.")
    return membership


def _budget(membership: Membership, budget_id: str) -> Budget:
    try:
        return selectors.budget_for(membership.organization, budget_id)
    except NotFound as exc:
        raise Http404("No such budget.") from exc


def _saved(org_slug: str) -> HttpResponse:
    return redirect(reverse("billing-page", kwargs={"org_slug": org_slug}) + "#budgets")


def _fields(membership: Membership, form: BudgetForm) -> dict:
    """The form's cleaned data as the service's Budget fields."""
    data = form.cleaned_data
    return {
        "name": data["name"],
        "project": services.project_of(membership.organization, data["project"] or None),
        "period": data["period"],
        "limit_micros": usd_to_micros(data["limit_usd"]),
        "action": data["action"],
        "thresholds": data["thresholds"],
    }


def _refuse(form: BudgetForm, exc: ApiError) -> None:
    """Put the service's refusal at the field it names (else above the form)."""
    form.add_error(_FIELD_OF_PARAM.get(exc.param or ""), str(exc.detail))


@login_required
@require_POST
def budget_create(request: HttpRequest, org_slug: str) -> HttpResponse:
    membership = _admin_membership(request, org_slug)
    form = BudgetForm(request.POST, organization=membership.organization)
    if form.is_valid():
        try:
            services.budget_create(
                organization=membership.organization,
                created_by=request.user,
                **_fields(membership, form),
            )
        except ApiError as exc:
            _refuse(form, exc)
        else:
            return _saved(org_slug)
    return page_response(request, membership, budget_form=form, status=400)


@login_required
@require_http_methods(["GET", "POST"])
def budget_edit(request: HttpRequest, org_slug: str, budget_id: str) -> HttpResponse:
    """The edit page of one budget (GET), and its changes (POST)."""
    membership = _admin_membership(request, org_slug)
    budget = _budget(membership, budget_id)
    if request.method == "GET":
        return _edit_page(request, membership, budget, BudgetForm.editing(budget))
    form = BudgetForm.editing(budget, request.POST)
    if form.is_valid():
        try:
            services.budget_update(budget=budget, **_fields(membership, form))
        except ApiError as exc:
            _refuse(form, exc)
        else:
            return _saved(org_slug)
    return _edit_page(request, membership, budget, form, status=400)


def _edit_page(
    request: HttpRequest, membership: Membership, budget: Budget, form: BudgetForm, status=200
) -> TemplateResponse:
    context = {"org": membership.organization, "budget": budget, "form": form}
    return TemplateResponse(request, "billing/budget_edit.html", context, status=status)


@login_required
@require_POST
def budget_delete(request: HttpRequest, org_slug: str, budget_id: str) -> HttpResponse:
    membership = _admin_membership(request, org_slug)
    services.budget_delete(budget=_budget(membership, budget_id))
    return _saved(org_slug)
