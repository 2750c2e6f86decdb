"""The wallet's history: every transfer of an organization that moves or reserves money of
its wallet (grants, holds and their voids or posts, usage, refunds, corrections), newest
first, with the job, attempt and project it concerns by their public names."""

from __future__ import annotations

from datetime import datetime

from django.db.models import F, Q, QuerySet, Sum, Value

from apps.billing.models import Account, Transfer

PREFIX = "txn_"


def public_id(transfer_pk: int | None) -> str | None:
    return None if transfer_pk is None else f"{PREFIX}{transfer_pk}"


def wallet_transfers(organization_id: int, *, code: str | None = None) -> QuerySet[Transfer]:
    """The organization's transfers that touch its wallet, each annotated with `wallet_id`
    (to tell credits from debits), `job_public_id`, `attempt_number` and
    `project_public_id`. Empty before the wallet exists; no other organization's rows."""
    wallet_id = (
        Account.objects.filter(organization_id=organization_id, kind=Account.Kind.WALLET)
        .values_list("pk", flat=True)
        .first()
    )
    if wallet_id is None:
        return Transfer.objects.none()
    rows = Transfer.objects.filter(organization_id=organization_id).filter(
        Q(debit_account_id=wallet_id) | Q(credit_account_id=wallet_id)
    )
    if code:
        rows = rows.filter(code=code)
    return rows.annotate(
        wallet_id=Value(wallet_id),
        job_public_id=F("job__public_id"),
        attempt_number=F("attempt__number"),
        project_public_id=F("project__public_id"),
    )


def direction(transfer: Transfer) -> str:
    """`credit` when the transfer adds to the wallet, `debit` when it takes from it."""
    return "credit" if transfer.credit_account_id == transfer.wallet_id else "debit"


def usage_since(organization_id: int, since: datetime) -> int:
    """Posted usage of the organization since `since`, in micro-dollars."""
    total = Transfer.objects.filter(
        organization_id=organization_id,
        code=Transfer.Code.USAGE,
        state=Transfer.State.POSTED,
        created_at__gte=since,
    ).aggregate(total=Sum("amount_micros"))["total"]
    return total or 0
