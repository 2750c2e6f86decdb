"""Jobs billed through the real services, for the billing API tests: created with
`job_create` (which holds), placed with `dispatch.allocate` (which opens a meter), aged, then
billed by `attempts.bill` and ended by `attempts.end_attempt` (which post the usage)."""

from __future__ import annotations

from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from apps.jobs.execution import attempts, dispatch
from apps.jobs.models import Attempt, Job
from tests.jobs.helpers import make_job

PRICE = 600_000  # $0.60 per GPU-hour: $0.01 a minute
ACCELERATOR = "nvidia-a100-80gb"
COMPUTE = {"accelerator": ACCELERATOR, "gpu_count": 1, "ephemeral_disk_gb": 10}


def roomy_offer(make_offer, price: int = PRICE):
    return make_offer("billing-cloud", ACCELERATOR, price=price, capacity=100)


def bill(job: Job) -> Job:
    with transaction.atomic():
        locked = Job.objects.select_for_update(of=("self",)).get(pk=job.pk)
        attempts.bill(locked)
    return Job.objects.get(pk=job.pk)


def billed_job(org, *, minutes: int, name: str = "train", end: bool = True, **body) -> Job:
    """A job of `org` whose one attempt was allocated `minutes` (and a few seconds) ago and
    is billed to now; `end=False` leaves the attempt running (its meter open)."""
    job = make_job(org, name=name, compute=COMPUTE, **body)
    attempt = dispatch.allocate(job.pk)
    assert attempt is not None, "no room for the job"
    Attempt.objects.filter(pk=attempt.pk).update(
        allocated_at=timezone.now() - timedelta(minutes=minutes, seconds=5),
        billing_started_at=timezone.now() - timedelta(minutes=minutes, seconds=5),
    )
    job = bill(job)
    if end:
        with transaction.atomic():
            Job.objects.select_for_update(of=("self",)).get(pk=job.pk)
            attempts.end_attempt(Attempt.objects.get(pk=attempt.pk), reason="test")
    return Job.objects.get(pk=job.pk)


def second_attempt(job: Job, *, minutes: int, price: int = 2 * PRICE) -> Job:
    """Give an ended job a second attempt `minutes` long at `price`, billed (as after a
    preemption: one job, two attempts, two prices)."""
    Job.objects.filter(pk=job.pk).update(attempt_count=2)
    now = timezone.now()
    Attempt.objects.create(
        job=job,
        number=2,
        accelerator=ACCELERATOR,
        gpu_count=1,
        price_micros_hr=price,
        allocated_at=now - timedelta(minutes=minutes, seconds=5),
        billing_started_at=now - timedelta(minutes=minutes, seconds=5),
        ended_at=now,
    )
    return bill(job)


def spend(org, micros: int, *, key: str = "spent", project=None) -> None:
    """Post `micros` of usage from `org`'s wallet now, as billing would (no job needed)."""
    from apps.billing import ledger

    ledger.transfer(
        organization_id=org.pk,
        debit="wallet",
        credit="usage",
        amount_micros=micros,
        code="usage",
        idempotency_key=key,
        project_id=project.pk if project is not None else None,
    )
