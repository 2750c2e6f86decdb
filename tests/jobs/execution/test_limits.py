"""Billing and limits, computed by the reconcile step on the real database."""

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.jobs import services
from apps.jobs.execution import attempts, dispatch, limits
from apps.jobs.models import Attempt, Job
from apps.jobs.states import JobState
from tests.jobs.helpers import make_job

pytestmark = pytest.mark.django_db


def _running(org, *, minutes_ago: float, price_micros_hr: int = 600_000, **overrides) -> Job:
    job = make_job(org, **overrides)
    attempt = dispatch.allocate(job.pk)
    for step in (JobState.PROVISIONING, JobState.RUNNING):
        services.job_transition(job_id=job.pk, to=step)
    Attempt.objects.filter(pk=attempt.pk).update(
        allocated_at=timezone.now() - timedelta(minutes=minutes_ago),
        billing_started_at=timezone.now() - timedelta(minutes=minutes_ago),
        price_micros_hr=price_micros_hr,
    )
    return Job.objects.get(pk=job.pk)


def test_billing_counts_whole_minutes_from_allocation_at_the_captured_price(org):
    job = _running(org, minutes_ago=10.9)
    assert attempts.bill(job) == 10 * 600_000 // 60
    job.refresh_from_db()
    assert job.accrued_micros == 100_000
    assert Attempt.objects.get(job=job).billed_minutes == 10


def test_an_ended_attempt_is_billed_to_its_end_only(org):
    job = _running(org, minutes_ago=30)
    attempt = Attempt.objects.get(job=job)
    Attempt.objects.filter(pk=attempt.pk).update(
        ended_at=attempt.billing_started_at + timedelta(minutes=5)
    )
    assert attempts.bill(Job.objects.get(pk=job.pk)) == 5 * 600_000 // 60


def test_each_attempt_is_billed_at_its_own_price(org):
    job = _running(org, minutes_ago=6)
    first = Attempt.objects.get(job=job)
    Attempt.objects.filter(pk=first.pk).update(
        ended_at=first.billing_started_at + timedelta(minutes=3)
    )
    Job.objects.filter(pk=job.pk).update(attempt_count=2)
    Attempt.objects.create(
        job=job,
        number=2,
        accelerator="cpu",
        gpu_count=1,
        price_micros_hr=1_200_000,
        allocated_at=timezone.now() - timedelta(minutes=2, seconds=5),
        billing_started_at=timezone.now() - timedelta(minutes=2, seconds=5),
    )
    assert attempts.bill(Job.objects.get(pk=job.pk)) == 3 * 10_000 + 2 * 20_000


def test_a_cost_limit_terminates_with_max_cost(org):
    job = _running(org, minutes_ago=20, limits={"max_cost_usd": 0.1})
    limits.enforce_limits(job.pk)
    job.refresh_from_db()
    assert (job.state, job.reason) == (JobState.TERMINATING, "max_cost")
    assert job.accrued_micros == 200_000


def test_a_runtime_limit_terminates_with_max_runtime(org):
    job = _running(org, minutes_ago=31, limits={"max_runtime_hours": 0.5})
    limits.enforce_limits(job.pk)
    job.refresh_from_db()
    assert (job.state, job.reason) == (JobState.TERMINATING, "max_runtime")


def test_limits_not_reached_change_nothing(org):
    job = _running(org, minutes_ago=5, limits={"max_runtime_hours": 1, "max_cost_usd": 1})
    limits.enforce_limits(job.pk)
    job.refresh_from_db()
    assert (job.state, job.reason) == (JobState.RUNNING, None)


def test_the_clock_scale_speeds_accounted_time(org, settings):
    settings.TRAINYARD_CLOCK_SCALE = 60
    job = _running(org, minutes_ago=0.5)  # 30 s of wall time count as 30 minutes
    assert attempts.bill(job) == 30 * 600_000 // 60


def test_limits_give_no_grace_and_a_cancel_does():
    assert limits.grace_for("max_cost") == 0
    assert limits.grace_for("cancelled") > 0


def test_every_attempt_bills_at_least_one_minute_from_its_allocation(org):
    job = _running(org, minutes_ago=0)
    assert attempts.bill(job) == 600_000 // 60  # allocated a moment ago: one minute already
    attempt = Attempt.objects.get(job=job)
    Attempt.objects.filter(pk=attempt.pk).update(
        ended_at=attempt.billing_started_at + timedelta(seconds=2)
    )
    assert attempts.bill(Job.objects.get(pk=job.pk)) == 600_000 // 60
    assert Attempt.objects.get(pk=attempt.pk).billed_minutes == 1


def test_a_workload_that_keeps_ending_at_once_pays_a_minute_for_each_attempt(org):
    job = _running(org, minutes_ago=0)
    first = Attempt.objects.get(job=job)
    Attempt.objects.filter(pk=first.pk).update(
        ended_at=first.billing_started_at + timedelta(seconds=5)
    )
    Job.objects.filter(pk=job.pk).update(attempt_count=2)
    Attempt.objects.create(
        job=job,
        number=2,
        accelerator="cpu",
        gpu_count=1,
        price_micros_hr=600_000,
        allocated_at=timezone.now() - timedelta(seconds=20),
        billing_started_at=timezone.now() - timedelta(seconds=20),
        ended_at=timezone.now() - timedelta(seconds=1),
    )
    assert attempts.bill(Job.objects.get(pk=job.pk)) == 2 * 600_000 // 60
    assert list(Attempt.objects.filter(job=job).values_list("billed_minutes", flat=True)) == [1, 1]
