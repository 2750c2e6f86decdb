"""Usage: what each attempt has cost, posted to the ledger as its minutes are billed.

Jobs bill each attempt in whole minutes at the price captured at allocation and call
`record` with the attempt's minutes so far (under the job's row lock). Each call posts the
difference since the last one as one `usage` transfer keyed `usage:<attempt>:<minutes>`:
a crash between calls, or a redelivered task, never posts a minute twice, and the job's
accrued spend always equals the sum of its usage transfers.
"""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.db.models import Exists, OuterRef, Sum

from apps.billing import ledger
from apps.billing.models import Meter
from apps.core.bulk import update_rows


def cost_micros(minutes: int, price_micros_hr: int) -> int:
    """What `minutes` whole minutes cost at `price_micros_hr` (rounded down to the micro)."""
    return minutes * price_micros_hr // 60


def record(
    *,
    attempt_id: int,
    job_id: int,
    organization_id: int,
    project_id: int,
    resource_id: str,
    resource_name: str,
    price_micros_hr: int,
    billed_minutes: int,
    ended_at: datetime | None = None,
    resource_type: str = "job",
) -> Meter:
    """Bring an attempt's meter to `billed_minutes` (opening it on first sight) and post
    what they added. `ended_at` closes the meter (the attempt holds no hardware)."""
    with transaction.atomic():
        meter = Meter.objects.select_for_update(no_key=True).filter(attempt_id=attempt_id).first()
        if meter is None:
            meter = open_meter(
                attempt_id=attempt_id,
                job_id=job_id,
                organization_id=organization_id,
                project_id=project_id,
                resource_type=resource_type,
                resource_id=resource_id,
                resource_name=resource_name,
                price_micros_hr=price_micros_hr,
            )
        fields = []
        if billed_minutes > meter.billed_minutes:
            owed = cost_micros(billed_minutes, price_micros_hr)
            amount = owed - meter.posted_micros
            if amount > 0:
                ledger.transfer(
                    organization_id=organization_id,
                    debit=ledger.Kind.WALLET,
                    credit=ledger.Kind.USAGE,
                    amount_micros=amount,
                    code=ledger.Code.USAGE,
                    idempotency_key=f"usage:{attempt_id}:{billed_minutes}",
                    project_id=project_id,
                    job_id=job_id,
                    attempt_id=attempt_id,
                    minutes=billed_minutes - meter.billed_minutes,
                    minutes_to=billed_minutes,
                )
            meter.billed_minutes = billed_minutes
            meter.posted_micros = owed
            fields += ["billed_minutes", "posted_micros"]
        if ended_at is not None and meter.ended_at is None:
            meter.ended_at = ended_at
            fields.append("ended_at")
            ledger.changed_on_commit(organization_id)
        if fields:
            meter.save(update_fields=fields)
    return meter


def open_meter(
    *,
    attempt_id: int,
    job_id: int,
    organization_id: int,
    project_id: int,
    resource_id: str,
    resource_name: str,
    price_micros_hr: int,
    resource_type: str = "job",
) -> Meter:
    """`record` at 0 minutes for an attempt created in the caller's transaction, whose
    meter cannot exist yet: one INSERT, where `record` first looks for the meter under a
    lock (a dispatch's allocation, on its hot path)."""
    meter = Meter.objects.create(
        attempt_id=attempt_id,
        job_id=job_id,
        organization_id=organization_id,
        project_id=project_id,
        resource_type=resource_type,
        resource_id=resource_id,
        resource_name=resource_name,
        price_micros_hr=price_micros_hr,
    )
    ledger.changed_on_commit(organization_id)  # the burn rate moved
    return meter


def record_many(readings: list[dict]) -> None:
    """`record(**reading)` for each reading (its keyword arguments), in one transaction:
    the meters read and locked in one query, the usage postings in one
    `ledger.transfer_many`, the meters written in one UPDATE. A reading whose attempt has no
    meter yet goes through `record` on its own (it opens one)."""
    if not readings:
        return
    with transaction.atomic():
        meters = {
            meter.attempt_id: meter
            for meter in Meter.objects.select_for_update(no_key=True)
            .filter(attempt_id__in=[reading["attempt_id"] for reading in readings])
            .order_by("attempt_id")
        }
        postings, changed = [], []
        for reading in readings:
            meter = meters.get(reading["attempt_id"])
            if meter is None:
                record(**reading)
                continue
            minutes, price = reading["billed_minutes"], reading["price_micros_hr"]
            touched = False
            if minutes > meter.billed_minutes:
                owed = cost_micros(minutes, price)
                amount = owed - meter.posted_micros
                if amount > 0:
                    postings.append(_usage_posting(reading, amount, minutes - meter.billed_minutes))
                meter.billed_minutes, meter.posted_micros = minutes, owed
                touched = True
            if reading.get("ended_at") is not None and meter.ended_at is None:
                meter.ended_at = reading["ended_at"]
                ledger.changed_on_commit(reading["organization_id"])
                touched = True
            if touched:
                changed.append(meter)
        ledger.transfer_many(postings)
        if changed:
            update_rows(changed, ["billed_minutes", "posted_micros", "ended_at"])


def _usage_posting(reading: dict, amount: int, minutes: int) -> ledger.Posting:
    return ledger.Posting(
        organization_id=reading["organization_id"],
        debit=ledger.Kind.WALLET,
        credit=ledger.Kind.USAGE,
        amount_micros=amount,
        code=ledger.Code.USAGE,
        idempotency_key=f"usage:{reading['attempt_id']}:{reading['billed_minutes']}",
        links={
            "project_id": reading["project_id"],
            "job_id": reading["job_id"],
            "attempt_id": reading["attempt_id"],
            "minutes": minutes,
            "minutes_to": reading["billed_minutes"],
        },
    )


def burn_micros_hr(organization_id: int, project_id: int | None = None) -> int:
    """What the organization (or one project) spends per hour now: the sum of its open
    meters' captured prices."""
    meters = Meter.objects.filter(organization_id=organization_id, ended_at__isnull=True)
    if project_id is not None:
        meters = meters.filter(project_id=project_id)
    return meters.aggregate(total=Sum("price_micros_hr"))["total"] or 0


def burn_rates() -> dict[tuple[int, int], int]:
    """What every organization spends per hour now, per project: the sum of the open meters'
    captured prices keyed (organization, project), in one query. An organization with an
    open meter is in it even where the prices sum to 0."""
    rows = (
        Meter.objects.filter(ended_at__isnull=True)
        .values_list("organization_id", "project_id")
        .annotate(total=Sum("price_micros_hr"))
    )
    return {(organization_id, project_id): total for organization_id, project_id, total in rows}


def metered(attempt_ids: list[int]) -> set[int]:
    """Those of the attempts that have a meter (open or closed)."""
    return set(
        Meter.objects.filter(attempt_id__in=attempt_ids).values_list("attempt_id", flat=True)
    )


def has_meter(attempt: OuterRef) -> Exists:
    """An expression for a query over attempts: whether the attempt `attempt` points at has a
    meter (open or closed)."""
    return Exists(Meter.objects.filter(attempt_id=attempt))
