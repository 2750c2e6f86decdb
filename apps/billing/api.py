"""`/api/v1/billing/...`: the caller's organization's balance, a summary for dashboards, the
wallet's transactions and its budgets.

Money is integer micro-dollars inside; every amount is answered twice, `*_ucredits` (exact,
an integer) and `*_usd` (dollars, a number). Any member may read; only admins and owners
write budgets (`write_role = Role.ADMIN`, else 403 `permission_denied`). Another
organization's budget or project is 404 `not_found`.
"""

from __future__ import annotations

from dataclasses import asdict

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.accounts.models import Role
from apps.accounts.permissions import COMPUTE_PERMISSIONS, caller
from apps.billing import history, selectors, services
from apps.billing.budgets import period_start
from apps.billing.models import Budget, Transfer
from apps.core.api import page, page_out, validated
from apps.core.errors import InvalidRequest
from apps.core.money import usd_to_micros
from apps.core.pagination import id_page, parse_page_request
from apps.core.serializers import IsoDateTimeField, StrictSerializer, UsdField

MAX_PAGE_SIZE = 200

_PAGE_PARAMS = [
    OpenApiParameter("limit", OpenApiTypes.INT, description=f"1 to {MAX_PAGE_SIZE}, default 50"),
    OpenApiParameter("cursor", OpenApiTypes.STR, description="next_cursor of the previous page"),
]


class BalanceOut(serializers.Serializer):
    balance_ucredits = serializers.IntegerField(source="balance_micros")
    balance_usd = UsdField(source="balance_micros")
    held_ucredits = serializers.IntegerField(source="held_micros")
    held_usd = UsdField(source="held_micros")
    available_ucredits = serializers.IntegerField(source="available_micros")
    available_usd = UsdField(source="available_micros")
    burn_ucredits_hr = serializers.IntegerField(source="burn_micros_hr")
    burn_usd_hr = UsdField(source="burn_micros_hr")


# Renders a `selectors.BudgetStatus`: the budget and what its current period has spent.
class BudgetOut(serializers.Serializer):
    id = serializers.CharField(source="budget.public_id")
    name = serializers.CharField(source="budget.name")
    scope = serializers.SerializerMethodField()
    project = serializers.CharField(source="budget.project.public_id", allow_null=True)
    project_name = serializers.CharField(source="budget.project.name", allow_null=True)
    period = serializers.ChoiceField(source="budget.period", choices=Budget.Period.values)
    limit_ucredits = serializers.IntegerField(source="budget.limit_micros")
    limit_usd = UsdField(source="budget.limit_micros")
    action = serializers.ChoiceField(source="budget.action", choices=Budget.Action.values)
    thresholds = serializers.ListField(source="budget.thresholds", child=serializers.IntegerField())
    spent_ucredits = serializers.IntegerField(source="spent_micros")
    spent_usd = UsdField(source="spent_micros")
    percent = serializers.SerializerMethodField()
    period_start = IsoDateTimeField()
    created_at = IsoDateTimeField(source="budget.created_at")
    updated_at = IsoDateTimeField(source="budget.updated_at")

    @extend_schema_field(serializers.ChoiceField(choices=["organization", "project"]))
    def get_scope(self, status_: selectors.BudgetStatus) -> str:
        return "project" if status_.budget.project else "organization"

    @extend_schema_field(OpenApiTypes.DOUBLE)
    def get_percent(self, status_: selectors.BudgetStatus) -> float:
        return round(status_.percent, 2)


class SpendDayOut(serializers.Serializer):
    day = serializers.DateField()
    project = serializers.CharField(allow_null=True)
    project_name = serializers.CharField(allow_null=True)
    ucredits = serializers.IntegerField(source="micros")
    usd = UsdField(source="micros")


class SummaryOut(BalanceOut):
    spent_this_month_ucredits = serializers.IntegerField(source="spent_this_month_micros")
    spent_this_month_usd = UsdField(source="spent_this_month_micros")
    budgets = BudgetOut(many=True)
    spend_per_day = SpendDayOut(many=True)


class BillingView(APIView):
    permission_classes = COMPUTE_PERMISSIONS


class BalanceView(BillingView):
    @extend_schema(
        responses=BalanceOut, operation_id="billing_balance", summary="The wallet's balance"
    )
    def get(self, request):
        return Response(BalanceOut(selectors.account_summary(caller(request).organization.pk)).data)


class SummaryView(BillingView):
    @extend_schema(
        responses=SummaryOut,
        operation_id="billing_summary",
        summary="Balance, this month's spend, budgets and spend per day (30 days)",
    )
    def get(self, request):
        organization_id = caller(request).organization.pk
        summary = {
            **asdict(selectors.account_summary(organization_id)),
            "spent_this_month_micros": history.usage_since(
                organization_id, period_start(Budget.Period.MONTH)
            ),
            "budgets": selectors.budget_status(organization_id),
            "spend_per_day": selectors.spend_per_day_by_project(organization_id),
        }
        return Response(SummaryOut(summary).data)


# Renders a transfer of `history.wallet_transfers`, which annotates the public ids.
class TransactionOut(serializers.Serializer):
    id = serializers.SerializerMethodField()
    created_at = IsoDateTimeField()
    code = serializers.ChoiceField(choices=Transfer.Code.values)
    state = serializers.ChoiceField(choices=Transfer.State.values)
    direction = serializers.SerializerMethodField()
    amount_ucredits = serializers.IntegerField(source="amount_micros")
    amount_usd = UsdField(source="amount_micros")
    resolves = serializers.SerializerMethodField(
        help_text="the pending transfer (hold) this one posts or voids"
    )
    project = serializers.CharField(source="project_public_id", allow_null=True)
    job = serializers.CharField(source="job_public_id", allow_null=True)
    attempt = serializers.IntegerField(source="attempt_number", allow_null=True)
    minutes = serializers.SerializerMethodField()
    memo = serializers.CharField()

    def get_id(self, transfer: Transfer) -> str:
        return history.public_id(transfer.pk)

    @extend_schema_field(serializers.ChoiceField(choices=["credit", "debit"]))
    def get_direction(self, transfer: Transfer) -> str:
        return history.direction(transfer)

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_resolves(self, transfer: Transfer) -> str | None:
        return history.public_id(transfer.pending_id)

    @extend_schema_field(serializers.IntegerField(allow_null=True))
    def get_minutes(self, transfer: Transfer) -> int | None:
        return transfer.minutes if transfer.code == Transfer.Code.USAGE else None


TransactionPageOut = page_out(TransactionOut, "TransactionPageOut")


class TransactionListView(BillingView):
    @extend_schema(
        parameters=[
            *_PAGE_PARAMS,
            OpenApiParameter("code", OpenApiTypes.STR, enum=Transfer.Code.values),
        ],
        responses=TransactionPageOut,
        operation_id="billing_transactions_list",
        summary="The wallet's transactions, newest first",
    )
    def get(self, request):
        code = request.query_params.get("code") or None
        if code is not None and code not in Transfer.Code.values:
            raise InvalidRequest(
                f"code must be one of {', '.join(Transfer.Code.values)}.", param="code"
            )
        page_request = parse_page_request(
            request.query_params, default_order="desc", max_limit=MAX_PAGE_SIZE
        )
        rows = history.wallet_transfers(caller(request).organization.pk, code=code)
        items, next_cursor = id_page(rows, page_request)
        return page(items, TransactionOut, next_cursor=next_cursor, total=rows.count())


class ThresholdsField(serializers.ListField):
    child = serializers.IntegerField(min_value=1, max_value=100)

    def to_internal_value(self, data):
        return sorted(set(super().to_internal_value(data)))


class BudgetIn(StrictSerializer):
    name = serializers.CharField(max_length=200, allow_blank=True, required=False)
    project = serializers.CharField(
        allow_null=True, required=False, help_text="a project id; null for the whole organization"
    )
    period = serializers.ChoiceField(choices=Budget.Period.values, required=False)
    limit_usd = serializers.DecimalField(max_digits=15, decimal_places=6)
    action = serializers.ChoiceField(choices=Budget.Action.values, required=False)
    thresholds = ThresholdsField(
        min_length=1, max_length=100, required=False, help_text="percents, default [50, 80, 100]"
    )

    def validate_limit_usd(self, value):
        if value <= 0:
            raise serializers.ValidationError("limit_usd must be more than 0.")
        return value


def budget_fields(organization, body: dict) -> dict:
    """A validated `BudgetIn` as Budget fields (the project found in `organization`)."""
    fields = dict(body)
    if "limit_usd" in fields:
        fields["limit_micros"] = usd_to_micros(fields.pop("limit_usd"))
    if "project" in fields:
        fields["project"] = services.project_of(organization, fields["project"])
    return fields


BudgetPageOut = page_out(BudgetOut, "BudgetPageOut")


def _budget_of_caller(request, budget_id: str) -> Budget:
    return selectors.budget_for(caller(request).organization, budget_id)


class BudgetListCreateView(BillingView):
    write_role = Role.ADMIN

    @extend_schema(
        parameters=_PAGE_PARAMS,
        responses=BudgetPageOut,
        operation_id="billing_budgets_list",
        summary="List budgets, oldest first",
    )
    def get(self, request):
        page_request = parse_page_request(request.query_params, max_limit=MAX_PAGE_SIZE)
        budgets = selectors.budgets_for(caller(request).organization)
        items, next_cursor = id_page(budgets, page_request)
        statuses = [selectors.status_of(budget) for budget in items]
        return page(statuses, BudgetOut, next_cursor=next_cursor, total=budgets.count())

    @extend_schema(
        request=BudgetIn,
        responses={201: BudgetOut},
        operation_id="billing_budgets_create",
        summary="Create a budget (admins)",
    )
    def post(self, request):
        who = caller(request)
        body = validated(BudgetIn, request.data)
        budget = services.budget_create(
            organization=who.organization,
            created_by=who.user,
            **budget_fields(who.organization, body),
        )
        return Response(BudgetOut(selectors.status_of(budget)).data, status=status.HTTP_201_CREATED)


class BudgetDetailView(BillingView):
    write_role = Role.ADMIN

    @extend_schema(responses=BudgetOut, operation_id="billing_budgets_get", summary="Get a budget")
    def get(self, request, budget_id: str):
        return Response(BudgetOut(selectors.status_of(_budget_of_caller(request, budget_id))).data)

    @extend_schema(
        request=BudgetIn(partial=True),
        responses=BudgetOut,
        operation_id="billing_budgets_update",
        summary="Change a budget (admins)",
    )
    def patch(self, request, budget_id: str):
        who = caller(request)
        budget = _budget_of_caller(request, budget_id)
        body = validated(BudgetIn, request.data, partial=True)
        budget = services.budget_update(budget=budget, **budget_fields(who.organization, body))
        return Response(BudgetOut(selectors.status_of(budget)).data)

    @extend_schema(
        responses={204: None}, operation_id="billing_budgets_delete", summary="Delete a budget"
    )
    def delete(self, request, budget_id: str):
        services.budget_delete(budget=_budget_of_caller(request, budget_id))
        return Response(status=status.HTTP_204_NO_CONTENT)
