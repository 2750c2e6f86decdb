"""Budgets: notices once per threshold and period, and terminate budgets (and exhausted
balances) ending the jobs in their scope before spend runs past the limit."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.core import mail
from django.db import connection
from django.utils import timezone

from apps.billing import budgets
from apps.billing.models import Budget, BudgetNotice
from apps.catalog.models import Accelerator
from apps.jobs.execution import dispatch
from apps.jobs.execution.reconcile import reconcile
from apps.jobs.models import Attempt, Job
from apps.jobs.states import JobState
from tests.billing.api_helpers import spend
from tests.factories import MembershipFactory, OrganizationFactory, ProjectFactory
from tests.jobs.helpers import make_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def dear(make_offer):
    """An accelerator of its own at $60 per GPU-hour: $1 a minute."""
    Accelerator.objects.create(name="dear", display_name="Dear", vendor="cpu", gpu_counts=[1])
    offer = make_offer("dear-host", "dear", price=60_000_000, capacity=4, gpu_counts=[1])
    offer.provider.kind = "local"
    offer.provider.save()
    return offer


def _dear_job(org, **overrides) -> Job:
    return make_job(
        org, compute={"accelerator": "dear", "gpu_count": 1, "ephemeral_disk_gb": 1}, **overrides
    )


def _allocated(job: Job, minutes_ago: float) -> Attempt:
    attempt = dispatch.allocate(job.pk)
    Attempt.objects.filter(pk=attempt.pk).update(
        allocated_at=timezone.now() - timedelta(minutes=minutes_ago),
        billing_started_at=timezone.now() - timedelta(minutes=minutes_ago),
    )
    return attempt


def _budget(org, limit_micros, action="alert", project=None, period="month", **extra):
    return Budget.objects.create(
        public_id=f"bud_{Budget.objects.count()}",
        organization=org,
        project=project,
        limit_micros=limit_micros,
        action=action,
        period=period,
        thresholds=extra.get("thresholds", [50, 80, 100]),
    )


def test_a_terminate_budget_ends_the_jobs_in_its_scope_with_budget_exhausted(org, dear, settings):
    settings.RECONCILE_INTERVAL_S = 5
    _budget(org, 1_000_000, action="terminate")
    job = _dear_job(org)
    attempt = _allocated(job, 0.5)  # $60/h: the first minute ($1) is billed at allocation
    waiting = make_job(org)  # not placed yet: ended now, it could only spend more
    reconcile()
    job.refresh_from_db()
    waiting.refresh_from_db()
    assert (waiting.state, waiting.reason) == (JobState.TERMINATED, "budget_exhausted")
    assert (job.state, job.reason) == (JobState.ALLOCATING, None)  # inside its paid minute
    Attempt.objects.filter(pk=attempt.pk).update(
        billing_started_at=timezone.now() - timedelta(minutes=1.1)
    )
    reconcile()  # its paid minute is over
    job.refresh_from_db()
    assert (job.state, job.reason) == (JobState.TERMINATING, "budget_exhausted")
    assert job.accrued_micros == 1_000_000  # and billing stopped there
    assert (
        "budget of the organization is spent" in job.events.get(type="terminate_requested").message
    )


def test_terminate_acts_ahead_when_what_is_left_would_not_last_until_the_next_pass(
    org, dear, settings
):
    settings.RECONCILE_INTERVAL_S = 5  # the horizon: 5 s + the minute being billed
    _budget(org, 3_500_000, action="terminate")  # $3.50; $1 a minute
    job = _dear_job(org)
    _allocated(job, 2.2)  # $2 billed, $1.50 left: more than 65 s at $1 a minute ($1.08)
    reconcile()
    job.refresh_from_db()
    assert job.reason is None
    Attempt.objects.filter(job=job).update(
        allocated_at=timezone.now() - timedelta(minutes=3.1),
        billing_started_at=timezone.now() - timedelta(minutes=3.1),
    )
    reconcile()  # $3 billed, $0.50 left: it would not last
    job.refresh_from_db()
    assert (job.state, job.reason) == (JobState.TERMINATING, "budget_exhausted")
    assert job.accrued_micros <= 3_500_000


def test_a_project_budget_ends_only_that_projects_jobs(org, dear):
    spender, other = ProjectFactory(organization=org), ProjectFactory(organization=org)
    _budget(org, 1_500_000, action="terminate", project=spender)
    mine = _dear_job(org, project=spender.public_id)
    _allocated(mine, 2.1)  # $2 billed
    theirs = make_job(org, project=other.public_id)
    reconcile()
    mine.refresh_from_db()
    theirs.refresh_from_db()
    assert mine.reason == "budget_exhausted"
    assert theirs.reason is None and theirs.state != JobState.TERMINATED


def test_an_exhausted_balance_behaves_like_a_terminate_budget(dear, settings):
    settings.RECONCILE_INTERVAL_S = 5
    org = OrganizationFactory(credits_usd=125)
    job = _dear_job(org)  # holds $120: two hours at $60
    _allocated(job, 125.5)  # $125 spent, nothing left for the minute it is in
    reconcile()
    job.refresh_from_db()
    assert (job.state, job.reason) == (JobState.TERMINATING, "budget_exhausted")


def test_alert_budgets_notice_each_threshold_once_and_mail_the_admins(
    org, dear, django_capture_on_commit_callbacks
):
    admin = MembershipFactory(organization=org, role="admin").user
    MembershipFactory(organization=org, role="member")
    budget = _budget(org, 10_000_000)
    job = _dear_job(org)
    attempt = _allocated(job, 5.5)  # $5: 50 %
    with django_capture_on_commit_callbacks(execute=True):
        reconcile()
        reconcile()
    assert list(BudgetNotice.objects.values_list("threshold", flat=True)) == [50]
    Attempt.objects.filter(pk=attempt.pk).update(
        allocated_at=timezone.now() - timedelta(minutes=8.5),
        billing_started_at=timezone.now() - timedelta(minutes=8.5),
    )
    with django_capture_on_commit_callbacks(execute=True):
        reconcile()  # $8: 80 %
    assert sorted(BudgetNotice.objects.values_list("threshold", flat=True)) == [50, 80]
    job.refresh_from_db()
    assert job.state not in (JobState.TERMINATING, JobState.TERMINATED)  # alert only
    assert [m.to for m in mail.outbox] == [[admin.email], [admin.email]]
    assert "80%" in mail.outbox[1].subject
    assert budget.notices.get(threshold=80).spent_micros == 8_000_000


def test_a_new_period_notices_again(org):
    budget = _budget(org, 100, period="day")
    spend(org, 60, key="yesterday")
    yesterday = timezone.now() - timedelta(days=1)
    budgets.evaluate(now=yesterday)
    budgets.evaluate()
    starts = sorted(
        BudgetNotice.objects.filter(budget=budget).values_list("period_start", flat=True)
    )
    assert len(starts) == 2 and starts[0] < starts[1]


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_two_passes_racing_write_exactly_one_80_percent_notice():
    org = OrganizationFactory()
    _budget(org, 100, thresholds=[80])
    spend(org, 85)
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []

    def evaluate():
        barrier.wait()
        try:
            budgets.evaluate()
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=evaluate) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert BudgetNotice.objects.filter(threshold=80).count() == 1
    assert len(mail.outbox) == 0  # nobody to mail: the org has no admins
