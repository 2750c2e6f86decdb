"""Reads of an organization's money for the API and the Billing page. Every function takes
the organization (or its id) and reads only its rows."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import QuerySet, Sum
from django.db.models.functions import TruncDate
from django.utils import timezone

from apps.billing import history, ledger
from apps.billing.budgets import period_start, spent_micros
from apps.billing.models import Budget, BudgetNotice, Transfer
from apps.billing.usage import burn_micros_hr
from apps.core.errors import NotFound
from apps.core.pagination import PageRequest, id_page
from apps.projects.models import Project


@dataclass(frozen=True)
class AccountSummary:
    balance_micros: int
    held_micros: int
    available_micros: int
    burn_micros_hr: int


def account_summary(organization_id: int) -> AccountSummary:
    """Balance (posted), held (open holds), available (balance - held) and the burn rate
    (the captured prices of the organization's live attempts), in micro-dollars."""
    balance = ledger.balance(organization_id)
    return AccountSummary(
        balance_micros=balance.balance_micros,
        held_micros=balance.held_micros,
        available_micros=balance.available_micros,
        burn_micros_hr=burn_micros_hr(organization_id),
    )


@dataclass(frozen=True)
class BudgetStatus:
    budget: Budget
    period_start: datetime
    spent_micros: int

    @property
    def percent(self) -> float:
        return self.spent_micros * 100 / self.budget.limit_micros


def status_of(budget: Budget, now: datetime | None = None) -> BudgetStatus:
    """The budget with what its current period has spent so far."""
    start = period_start(budget.period, now)
    return BudgetStatus(budget, start, spent_micros(budget, start))


def budgets_for(organization) -> QuerySet[Budget]:
    """The organization's budgets, with their projects."""
    return Budget.objects.filter(organization=organization).select_related("project")


def budget_for(organization, public_id: str) -> Budget:
    """One budget of the organization; NotFound when it is another's, or none."""
    budget = budgets_for(organization).filter(public_id=public_id).first()
    if budget is None:
        raise NotFound()
    return budget


def budget_status(organization_id: int, now: datetime | None = None) -> list[BudgetStatus]:
    """Each of the organization's budgets with what its period has spent so far."""
    statuses = []
    for budget in (
        Budget.objects.filter(organization_id=organization_id)
        .select_related("project")
        .order_by("project_id", "period", "id")
    ):
        statuses.append(status_of(budget, now))
    return statuses


def spend_per_day(organization_id: int, days: int = 30) -> list[dict]:
    """Posted usage per UTC day and project over the last `days` days:
    `[{"day": date, "project_id": int, "project__name": str, "micros": int}, ...]`, oldest
    first."""
    since = (timezone.now() - timedelta(days=days - 1)).replace(
        hour=0, minute=0, second=0, microsecond=0
    )
    return list(
        Transfer.objects.filter(
            organization_id=organization_id, code=Transfer.Code.USAGE, created_at__gte=since
        )
        .annotate(day=TruncDate("created_at"))
        .values("day", "project_id", "project__name")
        .annotate(micros=Sum("amount_micros"))
        .order_by("day", "project_id")
    )


def spend_per_day_by_project(organization_id: int, days: int = 30) -> list[dict]:
    """`spend_per_day` with each project's public id:
    `[{"day": date, "project": "prj_…", "project_name": str, "micros": int}, ...]`."""
    days_rows = spend_per_day(organization_id, days)
    public_ids = dict(
        Project.objects.filter(pk__in={d["project_id"] for d in days_rows}).values_list(
            "pk", "public_id"
        )
    )
    return [
        {
            "day": day["day"],
            "project": public_ids.get(day["project_id"]),
            "project_name": day["project__name"],
            "micros": day["micros"],
        }
        for day in days_rows
    ]


@dataclass(frozen=True)
class WalletLine:
    """One transfer as the wallet sees it. `effect`: `credit` or `debit` for posted money
    (the balance moved), `hold` for a pending reservation, `release` for a hold voided (only
    what is available moved)."""

    transfer: Transfer
    effect: str

    @property
    def moves_balance(self) -> bool:
        return self.effect in ("credit", "debit")


def _effect(transfer: Transfer) -> str:
    if transfer.state == Transfer.State.PENDING:
        return "hold"
    if transfer.state == Transfer.State.VOIDED:
        return "release"
    return history.direction(transfer)


def wallet_transfers_page(
    organization_id: int, page: PageRequest
) -> tuple[list[WalletLine], str | None]:
    """One page of the transfers touching the organization's wallet, by keyset on id
    (newest first when `page.descending`), and the next page's cursor (or None)."""
    rows, next_cursor = id_page(
        history.wallet_transfers(organization_id).select_related("job"), page
    )
    return [WalletLine(row, _effect(row)) for row in rows], next_cursor


def recent_notices(organization_id: int, limit: int = 10) -> list[BudgetNotice]:
    """The organization's newest budget notices, with their budgets."""
    return list(
        BudgetNotice.objects.filter(organization_id=organization_id)
        .select_related("budget__project")
        .order_by("-id")[:limit]
    )


def notice(organization_id: int, notice_id: int) -> BudgetNotice | None:
    """One notice of the organization (None when it is another's, or gone)."""
    return (
        BudgetNotice.objects.filter(organization_id=organization_id, pk=notice_id)
        .select_related("budget__project")
        .first()
    )


def spend_since(organization_id: int, since: datetime) -> int:
    """Posted usage of the organization since `since`, in micro-dollars."""
    return (
        Transfer.objects.filter(
            organization_id=organization_id, code=Transfer.Code.USAGE, created_at__gte=since
        ).aggregate(total=Sum("amount_micros"))["total"]
        or 0
    )
