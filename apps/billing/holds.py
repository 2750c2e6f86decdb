"""Holds at submit: a job reserves two hours of itself at its price ceiling before it is
created, so a queued job never starts without the money to run. The hold is a pending
wallet → usage transfer, voided when the job ends (its spend is posted as usage, minute by
minute, by `apps.billing.usage`)."""

from __future__ import annotations

from apps.billing import ledger
from apps.billing.errors import InsufficientBalance
from apps.billing.models import Transfer
from apps.core.money import format_usd

COVER_HOURS = 2


def hold_amount(
    *, ceiling_micros_per_gpu_hr: int, gpu_count: int, max_cost_micros: int | None
) -> int:
    """What a job holds: COVER_HOURS at its ceiling for all its GPUs, capped by its
    `max_cost_usd` (it can never spend more than that)."""
    amount = COVER_HOURS * ceiling_micros_per_gpu_hr * gpu_count
    if max_cost_micros is not None:
        amount = min(amount, max_cost_micros)
    return amount


def place_hold(
    *,
    organization_id: int,
    project_id: int,
    job_id: int,
    amount_micros: int,
    idempotency_key: str,
    created_by_id: int | None = None,
) -> Transfer | None:
    """Reserve `amount_micros` of the organization's available balance for a job, or raise
    InsufficientBalance (402) naming what is needed and what is available. Call inside the
    transaction that creates the job: the wallet's row stays locked until it commits, so
    two submits cannot both take the last dollar."""
    wallet = ledger.lock_wallet(organization_id)
    available = wallet.balance_micros - wallet.pending_debits
    if amount_micros > available:
        raise InsufficientBalance(
            f"This job needs {format_usd(amount_micros)} available ({COVER_HOURS} hours at its "
            f"price ceiling); the organization has {format_usd(max(available, 0))} available.",
        )
    if amount_micros <= 0:
        return None
    return ledger.transfer(
        organization_id=organization_id,
        debit=ledger.Kind.WALLET,
        credit=ledger.Kind.USAGE,
        amount_micros=amount_micros,
        code=ledger.Code.HOLD,
        pending=True,
        idempotency_key=idempotency_key,
        project_id=project_id,
        job_id=job_id,
        created_by_id=created_by_id,
        memo=f"{COVER_HOURS} h at the price ceiling",
    )


def release_holds(job_id: int) -> int:
    """Void every open hold of a job (when it ends). Idempotent; returns how many."""
    holds = Transfer.objects.filter(
        job_id=job_id,
        code=Transfer.Code.HOLD,
        state=Transfer.State.PENDING,
        resolution__isnull=True,
    )
    count = 0
    for hold in holds:
        ledger.resolve(hold, post=False, memo="The job ended.")
        count += 1
    return count


def held_for_job(job_id: int) -> int:
    """What a job's open holds reserve now."""
    return sum(_open_holds(job_id).values_list("amount_micros", flat=True))


def _open_holds(job_id: int):
    return Transfer.objects.filter(
        job_id=job_id,
        code=Transfer.Code.HOLD,
        state=Transfer.State.PENDING,
        resolution__isnull=True,
    )
