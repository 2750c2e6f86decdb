"""A terminate budget ends a job at the end of the last minute it can pay for, never inside
a minute it paid for, and refuses a job before allocation when not even one minute of it
fits (issue 38, point 13: a $0.0025 budget and a $0.10/h job was billed its first minute
and terminated 0.27 s later)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db.models import F, Sum

from apps.billing import holds
from apps.billing.errors import BudgetExceeded
from apps.billing.models import Budget, Transfer
from apps.catalog.models import Accelerator
from apps.jobs import tasks
from apps.jobs.execution import dispatch
from apps.jobs.models import Attempt, Job
from apps.jobs.states import JobState
from tests.billing.api_helpers import spend
from tests.jobs.helpers import job_body, make_job

pytestmark = pytest.mark.django_db

PRICE = 100_000  # $0.10 an hour
MINUTE = 1_666  # what its first minute costs (rounded down to the micro)


@pytest.fixture
def slot(make_offer, settings):
    """An accelerator of its own with a local slot at $0.10/h (billing starts at allocation),
    and passes 5 s apart."""
    settings.RECONCILE_INTERVAL_S = 5
    Accelerator.objects.create(name="dime", display_name="Dime", vendor="cpu", gpu_counts=[1])
    offer = make_offer("dime-host", "dime", price=PRICE, capacity=2, gpu_counts=[1])
    offer.provider.kind = "local"
    offer.provider.save()
    return offer


def _budget(org, limit_micros: int) -> Budget:
    return Budget.objects.create(
        public_id=f"bud_{Budget.objects.count()}",
        organization=org,
        limit_micros=limit_micros,
        action=Budget.Action.TERMINATE,
        period=Budget.Period.LIFETIME,
    )


def _job(org) -> Job:
    return make_job(org, compute={"accelerator": "dime", "gpu_count": 1, "ephemeral_disk_gb": 1})


def _later(attempt: Attempt, seconds: float) -> None:
    """Move the attempt's clock `seconds` on (its start, and any billing stop, earlier)."""
    shift = timedelta(seconds=seconds)
    Attempt.objects.filter(pk=attempt.pk).update(
        allocated_at=F("allocated_at") - shift,
        billing_started_at=F("billing_started_at") - shift,
        billed_until=F("billed_until") - shift,
    )


def _usage(job: Job) -> int:
    rows = Transfer.objects.filter(job=job, code=Transfer.Code.USAGE)
    return rows.aggregate(total=Sum("amount_micros"))["total"] or 0


def test_a_budget_that_pays_one_minute_lets_the_job_run_it_out_then_ends_it(org, slot):
    _budget(org, 2_500)  # $0.0025: one minute ($0.001667), not two
    job = _job(org)
    attempt = dispatch.allocate(job.pk)
    assert attempt is not None

    tasks.reconcile()  # bills the first minute, 0.x s into it
    job.refresh_from_db()
    assert (job.state, job.reason) == (JobState.ALLOCATING, None)
    assert job.accrued_micros == _usage(job) == MINUTE
    assert holds.held_for_job(job.pk) > 0

    _later(attempt, 30)
    tasks.reconcile()  # still inside the minute it paid for
    job.refresh_from_db()
    assert (job.state, job.reason) == (JobState.ALLOCATING, None)

    _later(attempt, 31)
    tasks.reconcile()  # the paid minute is over and no second one fits
    job.refresh_from_db()
    assert (job.state, job.reason) == (JobState.TERMINATING, "budget_exhausted")
    assert job.accrued_micros == _usage(job) == MINUTE  # billing stopped at its end
    attempt.refresh_from_db()
    assert attempt.billed_until == attempt.billing_started_at + timedelta(minutes=1)


def test_a_budget_that_pays_two_minutes_ends_the_job_after_the_second(org, slot):
    _budget(org, 4_000)  # two minutes ($0.003333), not three
    job = _job(org)
    attempt = dispatch.allocate(job.pk)
    for seconds in (0, 50, 40):  # 0 s, 50 s, 90 s: inside minute 1, then minute 2
        _later(attempt, seconds)
        tasks.reconcile()
        job.refresh_from_db()
        assert (job.state, job.reason) == (JobState.ALLOCATING, None)
    _later(attempt, 31)  # 121 s: the second minute is billed, a third would not fit
    tasks.reconcile()
    job.refresh_from_db()
    assert (job.state, job.reason) == (JobState.TERMINATING, "budget_exhausted")
    assert job.accrued_micros == _usage(job) == 3_333


def test_a_budget_raised_in_time_lets_the_job_run_on(org, slot):
    budget = _budget(org, 2_500)
    job = _job(org)
    attempt = dispatch.allocate(job.pk)
    tasks.reconcile()
    attempt.refresh_from_db()
    assert attempt.billed_until is not None  # to stop at the end of its paid minute
    Budget.objects.filter(pk=budget.pk).update(limit_micros=1_000_000)
    tasks.reconcile()
    attempt.refresh_from_db()
    assert attempt.billed_until is None
    _later(attempt, 130)
    tasks.reconcile()
    job.refresh_from_db()
    assert (job.state, job.reason) == (JobState.ALLOCATING, None)
    assert job.accrued_micros == _usage(job) == 3_333  # billed on: two whole minutes


def test_not_even_one_minute_left_refuses_the_job_at_submit(org, slot, api_client_for):
    _budget(org, 1_000)  # less than one minute
    response = api_client_for(org).post(
        "/api/v1/compute/jobs",
        job_body(compute={"accelerator": "dime", "gpu_count": 1, "ephemeral_disk_gb": 1}),
        format="json",
        HTTP_IDEMPOTENCY_KEY="one",
    )
    assert response.status_code == 402
    error = response.json()["error"]
    assert error["type"] == "budget_exceeded"
    assert "less than one minute of this job" in error["message"]
    assert not Job.objects.filter(organization=org).exists()
    assert not Transfer.objects.filter(organization=org, code=Transfer.Code.HOLD).exists()


def test_a_budget_spent_since_submit_refuses_the_allocation(org, slot):
    _budget(org, 2_500)
    job = _job(org)
    spend(org, 1_000)  # another job's minutes: $0.0015 left, under one minute of this one
    assert dispatch.allocate(job.pk) is None
    job.refresh_from_db()
    assert (job.state, job.reason) == (JobState.TERMINATED, "budget_exhausted")
    assert "not one minute of this job" in job.events.get(type="terminate_requested").message
    assert not Attempt.objects.filter(job=job).exists()
    assert holds.held_for_job(job.pk) == 0 and _usage(job) == 0
    with pytest.raises(BudgetExceeded):  # and a new one is refused at once
        _job(org)
