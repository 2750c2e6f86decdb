"""What the Billing page shows, as partials: rendered for the first page load and again for
each live push (`apps.billing.consumers`), with the same templates, so a reload and a push
can never disagree."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

from django.template.loader import render_to_string
from django.utils import timezone

from apps.billing import selectors
from apps.billing.budgets import DEFAULT_THRESHOLDS
from apps.billing.models import Budget, BudgetNotice

SPEND_DAYS = 30
NOTICES_SHOWN = 10


@dataclass(frozen=True)
class BudgetBar:
    """One budget as a bar: how full (capped at 100 for the bar's width), the thresholds as
    ticks, and the highest threshold crossed (0: none), which gives the bar its state."""

    budget: Budget
    spent_micros: int
    percent: float
    thresholds: list[int]
    crossed: int

    @property
    def width(self) -> str:
        return f"{min(self.percent, 100):.1f}"

    @property
    def scope(self) -> str:
        return f"Project {self.budget.project.name}" if self.budget.project_id else "Organization"

    @property
    def state(self) -> str:
        """`ok`, `crossed` (a threshold under 80 %), `over-80` or `over-100`."""
        if self.crossed >= 100:
            return "over-100"
        if self.crossed >= 80:
            return "over-80"
        return "crossed" if self.crossed else "ok"


def budget_bars(organization_id: int) -> list[BudgetBar]:
    bars = []
    for status in selectors.budget_status(organization_id):
        thresholds = sorted(status.budget.thresholds or DEFAULT_THRESHOLDS)
        percent = status.percent
        crossed = max((t for t in thresholds if percent >= t), default=0)
        bars.append(BudgetBar(status.budget, status.spent_micros, percent, thresholds, crossed))
    return bars


def spend_chart(organization_id: int, days: int = SPEND_DAYS) -> dict:
    """Posted usage per UTC day for the last `days` days, one series per project in
    dollars, for uPlot (`x`: each day's midnight in epoch seconds; the page stacks them)."""
    today = timezone.now().astimezone(UTC).date()
    first = today - timedelta(days=days - 1)
    axis = [first + timedelta(days=n) for n in range(days)]
    index = {day: n for n, day in enumerate(axis)}
    series: dict[int | None, dict] = {}
    for row in selectors.spend_per_day(organization_id, days=days):
        day = row["day"] if isinstance(row["day"], date) else row["day"].date()
        if day not in index:
            continue
        entry = series.setdefault(
            row["project_id"],
            {"label": row["project__name"] or "No project", "values": [0.0] * days},
        )
        entry["values"][index[day]] += row["micros"] / 1_000_000
    return {
        "x": [int(datetime.combine(day, time(), tzinfo=UTC).timestamp()) for day in axis],
        "series": sorted(series.values(), key=lambda s: s["label"]),
    }


def live_context(organization_id: int) -> dict:
    """What the parts a push re-renders need: the cards and the budget bars."""
    return {
        "summary": selectors.account_summary(organization_id),
        "budgets": budget_bars(organization_id),
    }


def render_changed(organization_id: int) -> str:
    """The cards and the budget bars as out-of-band swaps, for one `billing.changed`."""
    context = {**live_context(organization_id), "oob": True}
    return render_to_string("billing/partials/cards.html", context) + render_to_string(
        "billing/partials/budgets.html", context
    )


def render_notice(organization_id: int, notice_id: int) -> str | None:
    """A new notice, prepended to the page's list (None when it is not this
    organization's)."""
    found = selectors.notice(organization_id, notice_id)
    if found is None:
        return None
    row = render_to_string("billing/partials/notice.html", {"notice": found})
    return f'<div hx-swap-oob="afterbegin:#budget-notices">{row}</div>'


def recent_notices(organization_id: int) -> list[BudgetNotice]:
    return selectors.recent_notices(organization_id, NOTICES_SHOWN)
