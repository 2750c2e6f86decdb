"""What other apps may listen to when a budget crosses a threshold, without `apps.billing`
knowing them (webhooks deliver it).

`budget_threshold` is sent once per `BudgetNotice` (budget, period, threshold), after the
write that created the notice has committed, by whichever process ran the budget pass (the
reconcile task). A receiver that raises is logged and does not stop the others or the pass.

Arguments: `notice` (the BudgetNotice, with its budget and organization loaded).
"""

from __future__ import annotations

from django.dispatch import Signal

budget_threshold = Signal()
