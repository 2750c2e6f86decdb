"""`/api/v1/billing/...`: the caller's organization's balance, a summary for dashboards, the
wallet's transactions and its budgets.

Money is integer micro-dollars inside; every amount is answered twice, `*_ucredits` (exact,
an integer) and `*_usd` (dollars, a number). Any member may read; only admins and owners
write budgets (`write_role = Role.ADMIN`, else 403 `permission_denied`). Another
organization's budget or project is 404 `not_found`.
"""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.accounts.models import Role
from apps.accounts.permissions import COMPUTE_PERMISSIONS, caller
from apps.billing import history, selectors, services
from apps.billing.budgets import period_start, spent_micros
from apps.billing.models import Budget, Transfer
from apps.core.errors import InvalidRequest
from apps.core.money import micros_to_usd, usd_to_micros
from apps.core.pagination import id_page, parse_page_request
from apps.core.serializers import StrictSerializer
from apps.projects.models import Project

MAX_PAGE_SIZE = 200

_PAGE_PARAMS = [
    OpenApiParameter("limit", OpenApiTypes.INT, description=f"1 to {MAX_PAGE_SIZE}, default 50"),
    OpenApiParameter("cursor", OpenApiTypes.STR, description="next_cursor of the previous page"),
]


def money(name: str, micros: int) -> dict:
    return {f"{name}_ucredits": micros, f"{name}_usd": micros_to_usd(micros)}


def balance_body(organization_id: int) -> dict:
    summary = selectors.account_summary(organization_id)
    return {
        **money("balance", summary.balance_micros),
        **money("held", summary.held_micros),
        **money("available", summary.available_micros),
        "burn_ucredits_hr": summary.burn_micros_hr,
        "burn_usd_hr": micros_to_usd(summary.burn_micros_hr),
    }


class BalanceOut(serializers.Serializer):
    balance_ucredits = serializers.IntegerField()
    balance_usd = serializers.FloatField()
    held_ucredits = serializers.IntegerField()
    held_usd = serializers.FloatField()
    available_ucredits = serializers.IntegerField()
    available_usd = serializers.FloatField()
    burn_ucredits_hr = serializers.IntegerField()
    burn_usd_hr = serializers.FloatField()


class BudgetOut(serializers.Serializer):
    id = serializers.CharField()
    name = serializers.CharField()
    scope = serializers.ChoiceField(choices=["organization", "project"])
    project = serializers.CharField(allow_null=True)
    project_name = serializers.CharField(allow_null=True)
    period = serializers.ChoiceField(choices=Budget.Period.values)
    limit_ucredits = serializers.IntegerField()
    limit_usd = serializers.FloatField()
    action = serializers.ChoiceField(choices=Budget.Action.values)
    thresholds = serializers.ListField(child=serializers.IntegerField())
    spent_ucredits = serializers.IntegerField()
    spent_usd = serializers.FloatField()
    percent = serializers.FloatField()
    period_start = serializers.DateTimeField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


def budget_body(status_: selectors.BudgetStatus) -> dict:
    budget = status_.budget
    project = budget.project
    return {
        "id": budget.public_id,
        "name": budget.name,
        "scope": "project" if project else "organization",
        "project": project.public_id if project else None,
        "project_name": project.name if project else None,
        "period": budget.period,
        **money("limit", budget.limit_micros),
        "action": budget.action,
        "thresholds": budget.thresholds,
        **money("spent", status_.spent_micros),
        "percent": round(status_.percent, 2),
        "period_start": status_.period_start.isoformat(),
        "created_at": budget.created_at.isoformat(),
        "updated_at": budget.updated_at.isoformat(),
    }


def _status_of(budget: Budget) -> selectors.BudgetStatus:
    start = period_start(budget.period)
    return selectors.BudgetStatus(budget, start, spent_micros(budget, start))


class SpendDayOut(serializers.Serializer):
    day = serializers.DateField()
    project = serializers.CharField(allow_null=True)
    project_name = serializers.CharField(allow_null=True)
    ucredits = serializers.IntegerField()
    usd = serializers.FloatField()


class SummaryOut(BalanceOut):
    spent_this_month_ucredits = serializers.IntegerField()
    spent_this_month_usd = serializers.FloatField()
    budgets = BudgetOut(many=True)
    spend_per_day = SpendDayOut(many=True)


def _spend_per_day(organization_id: int) -> list[dict]:
    days = selectors.spend_per_day(organization_id)
    public_ids = dict(
        Project.objects.filter(pk__in={d["project_id"] for d in days}).values_list(
            "pk", "public_id"
        )
    )
    return [
        {
            "day": day["day"].isoformat(),
            "project": public_ids.get(day["project_id"]),
            "project_name": day["project__name"],
            "ucredits": day["micros"],
            "usd": micros_to_usd(day["micros"]),
        }
        for day in days
    ]


class BillingView(APIView):
    permission_classes = COMPUTE_PERMISSIONS


class BalanceView(BillingView):
    @extend_schema(
        responses=BalanceOut, operation_id="billing_balance", summary="The wallet's balance"
    )
    def get(self, request):
        return Response(balance_body(caller(request).organization.pk))


class SummaryView(BillingView):
    @extend_schema(
        responses=SummaryOut,
        operation_id="billing_summary",
        summary="Balance, this month's spend, budgets and spend per day (30 days)",
    )
    def get(self, request):
        organization_id = caller(request).organization.pk
        spent = history.usage_since(organization_id, period_start(Budget.Period.MONTH))
        return Response(
            {
                **balance_body(organization_id),
                **money("spent_this_month", spent),
                "budgets": [budget_body(s) for s in selectors.budget_status(organization_id)],
                "spend_per_day": _spend_per_day(organization_id),
            }
        )


class TransactionOut(serializers.Serializer):
    id = serializers.CharField()
    created_at = serializers.DateTimeField()
    code = serializers.ChoiceField(choices=Transfer.Code.values)
    state = serializers.ChoiceField(choices=Transfer.State.values)
    direction = serializers.ChoiceField(choices=["credit", "debit"])
    amount_ucredits = serializers.IntegerField()
    amount_usd = serializers.FloatField()
    resolves = serializers.CharField(
        allow_null=True, help_text="the pending transfer (hold) this one posts or voids"
    )
    project = serializers.CharField(allow_null=True)
    job = serializers.CharField(allow_null=True)
    attempt = serializers.IntegerField(allow_null=True)
    minutes = serializers.IntegerField(allow_null=True)
    memo = serializers.CharField()


class TransactionPageOut(serializers.Serializer):
    data = TransactionOut(many=True)
    next_cursor = serializers.CharField(allow_null=True)
    total = serializers.IntegerField()


def transaction_body(transfer: Transfer) -> dict:
    return {
        "id": history.public_id(transfer.pk),
        "created_at": transfer.created_at.isoformat(),
        "code": transfer.code,
        "state": transfer.state,
        "direction": history.direction(transfer),
        **money("amount", transfer.amount_micros),
        "resolves": history.public_id(transfer.pending_id),
        "project": transfer.project_public_id,
        "job": transfer.job_public_id,
        "attempt": transfer.attempt_number,
        "minutes": transfer.minutes if transfer.code == Transfer.Code.USAGE else None,
        "memo": transfer.memo,
    }


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
        page = parse_page_request(
            request.query_params, default_order="desc", max_limit=MAX_PAGE_SIZE
        )
        rows = history.wallet_transfers(caller(request).organization.pk, code=code)
        items, next_cursor = id_page(rows, page)
        return Response(
            {
                "data": [transaction_body(t) for t in items],
                "next_cursor": next_cursor,
                "total": rows.count(),
            }
        )


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

    def fields_for(self, organization) -> dict:
        """The validated body as Budget fields (the project found in `organization`)."""
        data = dict(self.validated_data)
        if "limit_usd" in data:
            data["limit_micros"] = usd_to_micros(data.pop("limit_usd"))
        if "project" in data:
            data["project"] = services.project_of(organization, data["project"])
        return data


class BudgetPageOut(serializers.Serializer):
    data = BudgetOut(many=True)
    next_cursor = serializers.CharField(allow_null=True)
    total = serializers.IntegerField()


def _budget_of_caller(request, budget_id: str) -> Budget:
    return get_object_or_404(
        Budget.objects.select_related("project"),
        organization=caller(request).organization,
        public_id=budget_id,
    )


class BudgetListCreateView(BillingView):
    write_role = Role.ADMIN

    @extend_schema(
        parameters=_PAGE_PARAMS,
        responses=BudgetPageOut,
        operation_id="billing_budgets_list",
        summary="List budgets, oldest first",
    )
    def get(self, request):
        page = parse_page_request(request.query_params, max_limit=MAX_PAGE_SIZE)
        budgets = Budget.objects.filter(organization=caller(request).organization).select_related(
            "project"
        )
        items, next_cursor = id_page(budgets, page)
        return Response(
            {
                "data": [budget_body(_status_of(b)) for b in items],
                "next_cursor": next_cursor,
                "total": budgets.count(),
            }
        )

    @extend_schema(
        request=BudgetIn,
        responses={201: BudgetOut},
        operation_id="billing_budgets_create",
        summary="Create a budget (admins)",
    )
    def post(self, request):
        who = caller(request)
        body = BudgetIn(data=request.data)
        body.is_valid(raise_exception=True)
        budget = services.budget_create(
            organization=who.organization,
            created_by=who.user,
            **body.fields_for(who.organization),
        )
        return Response(budget_body(_status_of(budget)), status=status.HTTP_201_CREATED)


class BudgetDetailView(BillingView):
    write_role = Role.ADMIN

    @extend_schema(responses=BudgetOut, operation_id="billing_budgets_get", summary="Get a budget")
    def get(self, request, budget_id: str):
        return Response(budget_body(_status_of(_budget_of_caller(request, budget_id))))

    @extend_schema(
        request=BudgetIn(partial=True),
        responses=BudgetOut,
        operation_id="billing_budgets_update",
        summary="Change a budget (admins)",
    )
    def patch(self, request, budget_id: str):
        who = caller(request)
        budget = _budget_of_caller(request, budget_id)
        body = BudgetIn(data=request.data, partial=True)
        body.is_valid(raise_exception=True)
        budget = services.budget_update(budget=budget, **body.fields_for(who.organization))
        return Response(budget_body(_status_of(budget)))

    @extend_schema(
        responses={204: None}, operation_id="billing_budgets_delete", summary="Delete a budget"
    )
    def delete(self, request, budget_id: str):
        services.budget_delete(budget=_budget_of_caller(request, budget_id))
        return Response(status=status.HTTP_204_NO_CONTENT)
