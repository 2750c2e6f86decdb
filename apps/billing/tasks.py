"""Billing's periodic work. Thin: call the ledger, log what it found."""

from __future__ import annotations

import logging

from apps.billing import ledger
from apps.core.tasks import trainyard_task

logger = logging.getLogger(__name__)


@trainyard_task("billing.audit_ledger", acks_late=False, max_retries=0)
def audit_ledger() -> int:
    """Recompute every account's sums from the transfers and log an ERROR for each cached
    sum that differs (a bug or a hand edit: the cache is what holds are checked against).
    Returns how many differ. Read-only, so a skipped or doubled run costs nothing."""
    mismatches = ledger.audit()
    for mismatch in mismatches:
        logger.error(
            "ledger audit: account %s %s is %s cached but %s from its transfers",
            mismatch.account_id,
            mismatch.column,
            mismatch.cached,
            mismatch.recomputed,
        )
    if ledger.total_balance() != 0:
        logger.error("ledger audit: the accounts sum to %s, not 0", ledger.total_balance())
    return len(mismatches)
