"""Usage is posted to the ledger as an attempt's minutes are billed: once per minute
boundary crossed, never twice, and always summing to the job's accrued spend."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from apps.billing import ledger
from apps.billing.models import Meter, Transfer
from apps.billing.usage import burn_micros_hr
from apps.jobs import services
from apps.jobs.execution import attempts, dispatch, limits, reports, supervision
from apps.jobs.models import Attempt, Job
from apps.jobs.states import JobState
from tests.jobs.helpers import make_job

pytestmark = pytest.mark.django_db
PRICE = 600_000  # the local cpu offer: $0.60 per hour for one GPU


@pytest.fixture(autouse=True)
def priced_cpu(cpu_offer):
    type(cpu_offer).objects.filter(pk=cpu_offer.pk).update(
        price_per_gpu_hour_micros=PRICE,
        min_price_per_gpu_hour_micros=PRICE,
        max_price_per_gpu_hour_micros=PRICE,
    )


def _allocated(org) -> tuple[Job, Attempt]:
    job = make_job(org)
    attempt = dispatch.allocate(job.pk)
    return Job.objects.get(pk=job.pk), attempt


def _age(attempt: Attempt, minutes: float) -> None:
    Attempt.objects.filter(pk=attempt.pk).update(
        allocated_at=timezone.now() - timedelta(minutes=minutes),
        billing_started_at=timezone.now() - timedelta(minutes=minutes),
    )


def _usage(job: Job) -> list[Transfer]:
    return list(Transfer.objects.filter(job=job, code="usage").order_by("id"))


def test_allocation_opens_a_meter_and_the_burn_rate_counts_it(org):
    job, attempt = _allocated(org)
    meter = Meter.objects.get(attempt_id=attempt.pk)
    assert (meter.price_micros_hr, meter.ended_at, meter.resource_id) == (
        PRICE,
        None,
        job.public_id,
    )
    assert burn_micros_hr(org.pk) == PRICE


def test_each_pass_posts_the_minutes_added_since_the_last_and_nothing_twice(org):
    job, attempt = _allocated(org)
    _age(attempt, 3.5)
    limits.enforce_limits(job.pk)
    limits.enforce_limits(job.pk)  # same minute: nothing new
    _age(attempt, 7.2)
    limits.enforce_limits(job.pk)
    rows = _usage(job)
    assert [(r.minutes, r.minutes_to, r.amount_micros) for r in rows] == [
        (3, 3, 30_000),
        (4, 7, 40_000),
    ]
    assert [r.idempotency_key for r in rows] == [f"usage:{attempt.pk}:3", f"usage:{attempt.pk}:7"]
    job.refresh_from_db()
    assert job.accrued_micros == sum(r.amount_micros for r in rows) == 70_000
    assert ledger.balance(org.pk).balance_micros == 1_000_000_000 - 70_000


def test_a_redelivered_posting_moves_no_money_again(org):
    job, attempt = _allocated(org)
    _age(attempt, 2)
    limits.enforce_limits(job.pk)
    (row,) = _usage(job)
    again = ledger.transfer(
        organization_id=org.pk,
        debit="wallet",
        credit="usage",
        amount_micros=row.amount_micros,
        code="usage",
        idempotency_key=row.idempotency_key,
    )
    assert again.pk == row.pk
    assert ledger.balance(org.pk).balance_micros == 1_000_000_000 - row.amount_micros


def test_the_end_of_an_attempt_posts_its_last_minutes_and_closes_its_meter(org):
    job, attempt = _allocated(org)
    _age(attempt, 4.5)
    with transaction.atomic():
        locked = Job.objects.select_for_update().get(pk=job.pk)
        attempts.end_attempt(Attempt.objects.get(pk=attempt.pk), reason="test")
    meter = Meter.objects.get(attempt_id=attempt.pk)
    assert meter.ended_at is not None
    assert (meter.billed_minutes, meter.posted_micros) == (4, 40_000)
    locked.refresh_from_db()
    assert locked.accrued_micros == sum(r.amount_micros for r in _usage(job)) == 40_000
    assert burn_micros_hr(org.pk) == 0


def test_a_job_that_ends_bills_exactly_its_usage_transfers(org):
    job, attempt = _allocated(org)
    services.job_transition(job_id=job.pk, to=JobState.PROVISIONING)
    Attempt.objects.filter(pk=attempt.pk).update(launched_at=timezone.now(), handle={"pid": 0})
    reports.runner_started(attempt.pk)
    _age(attempt, 12.3)
    reports.runner_exited(attempt.pk, 0)
    supervision.finalize(job.pk)
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED
    assert job.accrued_micros == 120_000 == sum(r.amount_micros for r in _usage(job))
    assert ledger.balance(org.pk).held_micros == 0  # its hold was voided


def test_a_limit_stops_billing_when_it_binds_not_when_the_hardware_is_released(org):
    job = make_job(org, limits={"max_cost_usd": 0.05})
    attempt = dispatch.allocate(job.pk)
    _age(attempt, 5.5)  # $0.05 at $0.60/h
    limits.enforce_limits(job.pk)
    job.refresh_from_db()
    assert (job.state, job.reason) == (JobState.TERMINATING, "max_cost")
    with transaction.atomic():  # the teardown takes four more minutes
        locked = Job.objects.select_for_update().get(pk=job.pk)
        attempts.bill(locked, now=timezone.now() + timedelta(minutes=4))
    supervision.finalize_terminating_without_runner(job.pk)
    job.refresh_from_db()
    assert job.state == JobState.TERMINATED
    assert job.accrued_micros == 50_000 == sum(r.amount_micros for r in _usage(job))
