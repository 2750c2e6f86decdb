"""Budgets: limits on spend per organization or project and period, and what happens as
spend approaches them.

- Periods are calendar periods in UTC: a day from midnight, a week from Monday, a month from
  its first day; `lifetime` counts all spend.
- Spend is the posted usage in scope since the period began (usage is posted as minutes
  are billed, so it lags the truth by at most one reconcile pass).
- Actions: `alert` only notifies; `block` refuses new jobs in scope once what is left would
  not pay one minute of the job at the cheapest price it could run at (402
  `budget_exceeded`); `terminate` does that too, refuses the allocation of a job whose
  first minute it cannot pay (the job ends `budget_exhausted`, unallocated), and ends
  running and waiting jobs in scope (`budget_exhausted`) once what is left would not pay
  the minutes its running jobs accrue until the next pass. A running job then ends at the
  end of the last minute the budget can pay for (`Exhausted.minutes_left` more, each),
  never inside a minute it paid for; its billing stops there.
- An organization whose balance would not pay those minutes is treated like a terminate
  budget on the whole organization.
- Each threshold (default 50, 80 and 100 %) is noticed once per budget and period: a
  `BudgetNotice` row (the unique constraint decides between racing passes), then an email
  to the organization's admins, a push to its Billing page and `threshold_hooks`
  (what webhooks hear), after commit.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.core.mail import send_mail
from django.db import IntegrityError, transaction
from django.db.models import Q, Sum
from django.utils import timezone

from apps.accounts.models import Membership, Role
from apps.billing import ledger, live, threshold_hooks
from apps.billing.errors import BudgetExceeded
from apps.billing.models import Budget, BudgetNotice, Transfer
from apps.billing.usage import burn_micros_hr, burn_rates, cost_micros
from apps.core.money import format_usd
from apps.core.transactions import after_commit

logger = logging.getLogger(__name__)

DEFAULT_THRESHOLDS = [50, 80, 100]
LIFETIME_START = datetime(2000, 1, 1, tzinfo=UTC)


def period_start(period: str, now: datetime | None = None) -> datetime:
    now = (now or timezone.now()).astimezone(UTC)
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    if period == Budget.Period.DAY:
        return midnight
    if period == Budget.Period.WEEK:
        return midnight - timedelta(days=midnight.weekday())
    if period == Budget.Period.MONTH:
        return midnight.replace(day=1)
    return LIFETIME_START


def spent_micros(budget: Budget, since: datetime | None = None) -> int:
    """Posted usage in the budget's scope since `since` (its period's start by default)."""
    usage = Transfer.objects.filter(
        organization_id=budget.organization_id,
        code=Transfer.Code.USAGE,
        created_at__gte=since or period_start(budget.period),
    )
    if budget.project_id is not None:
        usage = usage.filter(project_id=budget.project_id)
    return usage.aggregate(total=Sum("amount_micros"))["total"] or 0


def in_scope(project_id: int | None) -> Q:
    """Budgets that cover a job of `project_id`: the organization's, and the project's."""
    scope = Q(project__isnull=True)
    if project_id is not None:
        scope |= Q(project_id=project_id)
    return scope


def check_create(*, organization_id: int, project_id: int, first_minute_micros: int = 0) -> None:
    """Refuse a new job (402 `budget_exceeded`) when a blocking or terminating budget over
    its organization or project is spent, or has less left than `first_minute_micros` (the
    job's first billed minute at the cheapest price it could run at: not even one minute of
    it would fit)."""
    budgets = Budget.objects.filter(organization_id=organization_id).filter(
        in_scope(project_id), action__in=[Budget.Action.BLOCK, Budget.Action.TERMINATE]
    )
    for budget in budgets:
        spent = spent_micros(budget)
        if spent >= budget.limit_micros:
            raise BudgetExceeded(
                f"The {describe(budget)} is spent: {format_usd(spent)} of "
                f"{format_usd(budget.limit_micros)} this {_period_word(budget)}. "
                "Raise the budget or wait for the next period."
            )
        left = budget.limit_micros - spent
        if left < first_minute_micros:
            raise BudgetExceeded(
                f"The {describe(budget)} has {format_usd(left)} left this "
                f"{_period_word(budget)}, less than one minute of this job "
                f"({format_usd(first_minute_micros)} at the cheapest price it could run at). "
                "Raise the budget or wait for the next period."
            )


def refuse_allocation(*, organization_id: int, project_id: int, price_micros_hr: int) -> str:
    """Why a job of the project may not be allocated at `price_micros_hr` (its whole
    allocation per hour): a terminate budget over it that cannot pay the job's first minute
    on top of what the scope's running jobs accrue until the next pass. "" when none
    refuses it. Allocation bills a minute at once, so a job it refused never runs."""
    budgets = list(
        Budget.objects.filter(
            organization_id=organization_id, action=Budget.Action.TERMINATE
        ).filter(in_scope(project_id))
    )
    first_minute = cost_micros(1, price_micros_hr)
    for budget in budgets:
        rate = burn_micros_hr(organization_id, budget.project_id)
        left = budget.limit_micros - spent_micros(budget)
        promised = math.ceil(rate * lookahead_minutes() / 60)
        if left - promised < first_minute:
            return (
                f"The {describe(budget)} has {format_usd(max(left, 0))} left, "
                f"{format_usd(max(promised, 0))} of it for the jobs running now: not "
                f"one minute of this job ({format_usd(first_minute)})."
            )
    return ""


def describe(budget: Budget) -> str:
    scope = f"project {budget.project.name!r}" if budget.project_id else "organization"
    return f"{budget.period} budget of the {scope}"


def _period_word(budget: Budget) -> str:
    return "lifetime" if budget.period == Budget.Period.LIFETIME else budget.period


@dataclass(frozen=True)
class Exhausted:
    """A scope whose jobs must end `budget_exhausted` (project None: the whole organization):
    waiting ones now, running ones at the end of their paid minutes plus `minutes_left`
    more (what is left pays that many more minutes of every running job in the scope)."""

    organization_id: int
    project_id: int | None
    why: str
    minutes_left: int = 0


def lookahead_minutes() -> int:
    """Whole minutes a running job may accrue (each billed as it completes) before the next
    pass can act: the accounted time between two passes, rounded up, at least one."""
    return max(1, math.ceil(settings.RECONCILE_INTERVAL_S * settings.TRAINYARD_CLOCK_SCALE / 60))


def minutes_affordable(left_micros: int, burn_micros_hr: int) -> int:
    """How many more minutes of every job of a scope burning `burn_micros_hr` the scope's
    `left_micros` pays for (a large number when it burns nothing)."""
    if burn_micros_hr <= 0:
        return 0 if left_micros < 0 else 1 << 30
    return max(0, left_micros * 60 // burn_micros_hr)


def evaluate(now: datetime | None = None) -> list[Exhausted]:
    """One pass over budgets and balances: write the notices now due and return the scopes
    whose jobs must be terminated. Safe to run concurrently (notices are unique).

    A handful of queries however many budgets, organizations and live jobs there are: the
    budgets; their spend, per period, in one aggregate; the notices already written this
    period; the open meters' prices per organization and project (the burn rates); the
    wallets of the organizations that burn. Writes only the notices newly due."""
    now = now or timezone.now()
    exhausted: list[Exhausted] = []
    ahead = lookahead_minutes()
    burn: dict[int, dict[int, int]] = {}
    for (organization_id, project_id), rate in burn_rates().items():
        burn.setdefault(organization_id, {})[project_id] = rate
    every = list(Budget.objects.select_related("project", "organization").order_by("pk"))
    starts = {budget.pk: period_start(budget.period, now) for budget in every}
    spent = _spent_by_budget(every, starts)
    noticed = _noticed(every, starts)
    for budget in every:
        used = spent[budget.pk]
        _notice_thresholds(budget, starts[budget.pk], used, noticed)
        if budget.action != Budget.Action.TERMINATE:
            continue
        rate = _burn_in(burn, budget.organization_id, budget.project_id)
        minutes = minutes_affordable(budget.limit_micros - used, rate)
        if used >= budget.limit_micros or minutes < ahead:
            exhausted.append(
                Exhausted(
                    budget.organization_id,
                    budget.project_id,
                    f"The {describe(budget)} is spent ({format_usd(used)} of "
                    f"{format_usd(budget.limit_micros)}).",
                    minutes,
                )
            )
    balances = ledger.balances(burn)  # the organizations with an open meter
    for organization_id in sorted(burn):
        left = balances[organization_id].balance_micros
        minutes = minutes_affordable(left, _burn_in(burn, organization_id, None))
        if minutes < ahead:
            exhausted.append(
                Exhausted(
                    organization_id,
                    None,
                    f"The organization's balance is exhausted ({format_usd(left)} left).",
                    minutes,
                )
            )
    return exhausted


def _burn_in(burn: dict[int, dict[int, int]], organization_id: int, project_id: int | None) -> int:
    """`burn_micros_hr` of one scope (project None: the whole organization), from `burn`:
    `usage.burn_rates()` by organization, then project."""
    rates = burn.get(organization_id, {})
    return sum(rates.values()) if project_id is None else rates.get(project_id, 0)


def _spent_by_budget(every: list[Budget], starts: dict[int, datetime]) -> dict[int, int]:
    """`spent_micros` of each budget since its period's start (`starts`), in one query: the
    usage of the budgets' organizations summed per organization and project, once per
    distinct period start."""
    if not every:
        return {}
    periods = sorted(set(starts.values()))
    sums = {
        f"since_{i}": Sum("amount_micros", filter=Q(created_at__gte=since))
        for i, since in enumerate(periods)
    }
    rows = list(
        Transfer.objects.filter(
            organization_id__in={budget.organization_id for budget in every},
            code=Transfer.Code.USAGE,
            created_at__gte=periods[0],
        )
        .values("organization_id", "project_id")
        .annotate(**sums)
    )
    spent = {}
    for budget in every:
        column = f"since_{periods.index(starts[budget.pk])}"
        spent[budget.pk] = sum(
            row[column] or 0
            for row in rows
            if row["organization_id"] == budget.organization_id
            and budget.project_id in (None, row["project_id"])
        )
    return spent


def _noticed(every: list[Budget], starts: dict[int, datetime]) -> set[tuple[int, datetime, int]]:
    """The (budget, period start, threshold) notices already written for the budgets'
    current periods, in one query."""
    if not every:
        return set()
    rows = BudgetNotice.objects.filter(
        budget_id__in=list(starts), period_start__in=set(starts.values())
    ).values_list("budget_id", "period_start", "threshold")
    return {(budget_id, start, threshold) for budget_id, start, threshold in rows}


def _notice_thresholds(
    budget: Budget, start: datetime, spent: int, noticed: set[tuple[int, datetime, int]]
) -> None:
    percent = spent * 100 / budget.limit_micros
    for threshold in sorted(budget.thresholds or DEFAULT_THRESHOLDS):
        if percent < threshold:
            break
        if (budget.pk, start, threshold) in noticed:
            continue  # written by an earlier pass
        try:
            with transaction.atomic():
                notice = BudgetNotice.objects.create(
                    budget=budget,
                    organization_id=budget.organization_id,
                    period_start=start,
                    threshold=threshold,
                    spent_micros=spent,
                    limit_micros=budget.limit_micros,
                )
        except IntegrityError:
            continue  # noticed already, by a racing pass
        after_commit(_announce, notice.pk)


def _announce(notice_id: int) -> None:
    notice = BudgetNotice.objects.select_related("budget__project", "organization").get(
        pk=notice_id
    )
    budget = notice.budget
    subject = f"[Trainyard] {notice.organization.name}: {describe(budget)} at {notice.threshold}%"
    body = (
        f"The {describe(budget)} of {notice.organization.name} reached {notice.threshold}%: "
        f"{format_usd(notice.spent_micros)} of {format_usd(notice.limit_micros)} spent "
        f"this {_period_word(budget)}. Its action is {budget.action!r}."
    )
    recipients = list(
        Membership.objects.filter(
            organization_id=notice.organization_id, role__in=[Role.ADMIN, Role.OWNER]
        )
        .exclude(user__email="")
        .values_list("user__email", flat=True)
    )
    if recipients:
        try:
            send_mail(subject, body, settings.DEFAULT_FROM_EMAIL, recipients)
        except Exception:  # mail is best effort; the notice stands on the Billing page
            logger.warning("mailing budget notice %s failed", notice_id, exc_info=True)
    live.notice(notice.organization_id, notice.pk)
    threshold_hooks.tell(notice)
