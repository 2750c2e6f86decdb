"""Hooks of the apps above `billing` that act when a budget crosses a threshold (webhooks
deliver it), found by dotted path (`apps.core.hooks`): `billing` imports nothing of them.

`tell` is called once per `BudgetNotice` (budget, period, threshold), after the write that
created the notice has committed, by whichever process ran the budget pass (the reconcile
task). A hook is called as `hook(notice=notice)`, with its budget and organization loaded; one
that raises is logged and does not stop the others or the pass."""

from __future__ import annotations

from apps.billing.models import BudgetNotice
from apps.core.hooks import call_hooks

THRESHOLD_HOOKS: list[str] = [
    "apps.webhooks.hooks.budget_threshold",
]


def tell(notice: BudgetNotice) -> None:
    call_hooks(THRESHOLD_HOOKS, f"budget notice {notice.pk}", notice=notice)
