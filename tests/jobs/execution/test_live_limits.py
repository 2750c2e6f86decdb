"""The limits part of a reconcile pass over many live jobs: `enforce_live_limits` reads them
all in a fixed number of queries and bills (locks, writes, meters) only the jobs where
something is due; `budgets.evaluate` costs the same few queries however many budgets and
organizations there are; `bill` writes nothing when no whole minute moved."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
import redis
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings as django_settings
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from apps.billing import budgets
from apps.billing.models import Account, Budget, BudgetNotice, Meter, Transfer
from apps.billing.usage import burn_micros_hr
from apps.jobs import services
from apps.jobs.execution import attempts, dispatch, limits
from apps.jobs.live import push
from apps.jobs.models import Attempt, Job
from apps.jobs.states import JobState
from tests.factories import OrganizationFactory
from tests.jobs.helpers import make_job

pytestmark = pytest.mark.django_db

PRICE = 600_000  # $0.60 per GPU-hour: 10_000 a minute
COMPUTE = {"accelerator": "nvidia-a100-80gb", "gpu_count": 1, "ephemeral_disk_gb": 10}
WRITES = ("INSERT", "UPDATE", "DELETE", "SAVEPOINT")


@pytest.fixture(autouse=True)
def roomy(make_offer, settings):
    settings.TRAINYARD_CLOCK_SCALE = 1
    settings.RECONCILE_INTERVAL_S = 5
    offer = make_offer("roomy-cloud", "nvidia-a100-80gb", price=PRICE, capacity=1000)
    offer.provider.config = {
        "multi_tenant": True,
        "isolation": "users",
    }  # every organization's jobs at once
    offer.provider.save()
    return offer


def _running(org, *, age: timedelta, **overrides) -> Job:
    """A running job of `org` whose one attempt got its hardware `age` ago (not billed yet)."""
    job = make_job(org, compute=COMPUTE, **overrides)
    attempt = dispatch.allocate(job.pk)
    assert attempt is not None
    for step in (JobState.PROVISIONING, JobState.RUNNING):
        services.job_transition(job_id=job.pk, to=step)
    _age(attempt, age)
    return Job.objects.get(pk=job.pk)


def _age(attempt: Attempt, age: timedelta) -> None:
    Attempt.objects.filter(pk=attempt.pk).update(
        allocated_at=timezone.now() - age, billing_started_at=timezone.now() - age
    )


def _pass() -> tuple[int, int]:
    """The limits part of one reconcile pass, as reconcile runs it."""
    return limits.enforce_live_limits(), limits.enforce_budgets()


def _ledger_state() -> tuple:
    return (
        Transfer.objects.count(),
        sorted(Attempt.objects.values_list("pk", "billed_minutes")),
        sorted(Job.objects.values_list("pk", "accrued_micros", "live_seq", "state")),
        sorted(Meter.objects.values_list("pk", "billed_minutes", "posted_micros")),
        BudgetNotice.objects.count(),
    )


def _org_with_jobs(count: int) -> list[Job]:
    """An organization with `count` running jobs 5 min 10 s into their attempts, an alert
    budget they take past 50 % (60 %) at their first billing, and a terminate budget far
    from its limit, on the organization and on its project."""
    org = OrganizationFactory()
    jobs = [_running(org, age=timedelta(minutes=5, seconds=10)) for _ in range(count)]
    Budget.objects.create(
        public_id=f"bud_alert_{org.pk}",
        organization=org,
        limit_micros=count * 50_000 * 100 // 60,
        action="alert",
        thresholds=[50, 80, 100],
    )
    Budget.objects.create(
        public_id=f"bud_stop_{org.pk}",
        organization=org,
        project=jobs[0].project,
        limit_micros=100_000_000,
        action="terminate",
        period="day",
    )
    return jobs


def _quiet_pass_queries() -> list[str]:
    before = _ledger_state()
    with CaptureQueriesContext(connection) as queries:
        assert _pass() == (0, 0)
    assert _ledger_state() == before  # nothing written, not even a notice tried again
    sql = [q["sql"] for q in queries.captured_queries]
    assert not [s for s in sql if s.lstrip().upper().startswith(WRITES)]
    assert not [s for s in sql if "FOR UPDATE" in s.upper()]
    return sql


def test_a_pass_with_nothing_due_costs_the_same_few_queries_for_any_number_of_jobs():
    jobs = [*_org_with_jobs(3), *_org_with_jobs(3)]
    assert _pass() == (6, 0)  # the first pass bills every job to its 5th minute
    assert BudgetNotice.objects.filter(threshold=50).count() == 2
    few = _quiet_pass_queries()

    jobs += [job for _ in range(4) for job in _org_with_jobs(3)]
    assert _pass() == (12, 0)
    many = _quiet_pass_queries()

    assert len(many) == len(few) <= 8
    assert Attempt.objects.filter(billed_minutes=5).count() == len(jobs) == 18
    assert Transfer.objects.filter(code="usage").count() == 18  # one posting per job


def test_only_the_job_whose_next_minute_accrued_is_billed():
    org = OrganizationFactory()
    ticking = _running(org, age=timedelta(minutes=5, seconds=10))
    quiet = _running(org, age=timedelta(minutes=5, seconds=10))
    assert limits.enforce_live_limits() == 2
    quiet_seq = Job.objects.get(pk=quiet.pk).live_seq

    _age(Attempt.objects.get(job=ticking), timedelta(minutes=6, seconds=10))
    assert limits.enforce_live_limits() == 1

    ticking.refresh_from_db()
    quiet.refresh_from_db()
    assert Attempt.objects.get(job=ticking).billed_minutes == 6
    assert ticking.accrued_micros == 60_000
    assert [t.minutes_to for t in Transfer.objects.filter(job=ticking, code="usage")] == [5, 6]
    assert Attempt.objects.get(job=quiet).billed_minutes == 5
    assert [t.minutes_to for t in Transfer.objects.filter(job=quiet, code="usage")] == [5]
    assert (quiet.accrued_micros, quiet.live_seq) == (50_000, quiet_seq)  # no push either


def test_a_cost_limit_ends_the_job_in_the_pass_its_minute_is_billed():
    org = OrganizationFactory()
    capped = _running(org, age=timedelta(minutes=4, seconds=10), limits={"max_cost_usd": 0.05})
    free = _running(org, age=timedelta(minutes=4, seconds=10))
    assert limits.enforce_live_limits() == 2
    capped.refresh_from_db()
    assert capped.state == JobState.RUNNING  # $0.04 of $0.05

    for job in (capped, free):
        _age(Attempt.objects.get(job=job), timedelta(minutes=5, seconds=10))
    assert limits.enforce_live_limits() == 2
    capped.refresh_from_db()
    free.refresh_from_db()
    assert (capped.state, capped.reason, capped.accrued_micros) == (
        JobState.TERMINATING,
        "max_cost",
        50_000,
    )
    assert Attempt.objects.get(job=capped).billed_until is not None  # billing stopped there
    assert (free.state, free.accrued_micros) == (JobState.RUNNING, 50_000)


def test_a_runtime_limit_that_binds_between_two_minutes_ends_the_job_in_that_pass():
    org = OrganizationFactory()
    job = _running(org, age=timedelta(minutes=5, seconds=10), limits={"max_runtime_hours": 0.09})
    assert limits.enforce_live_limits() == 1  # 5.17 min of 5.4: billed, still running
    job.refresh_from_db()
    assert (job.state, Attempt.objects.get(job=job).billed_minutes) == (JobState.RUNNING, 5)

    _age(Attempt.objects.get(job=job), timedelta(minutes=5, seconds=30))  # same minute, 5.5
    assert limits.enforce_live_limits() == 1
    job.refresh_from_db()
    assert (job.state, job.reason) == (JobState.TERMINATING, "max_runtime")
    assert job.accrued_micros == 50_000


def test_an_ended_attempt_not_yet_billed_to_its_end_is_billed_and_its_meter_closed():
    org = OrganizationFactory()
    job = _running(org, age=timedelta(minutes=5, seconds=10))
    assert limits.enforce_live_limits() == 1
    attempt = Attempt.objects.get(job=job)
    # It ended 7 minutes in, and nothing billed it since (as after a crash mid-end).
    Attempt.objects.filter(pk=attempt.pk).update(
        billing_started_at=timezone.now() - timedelta(minutes=9),
        ended_at=timezone.now() - timedelta(minutes=2),
    )
    assert limits.enforce_live_limits() == 1
    job.refresh_from_db()
    assert (Attempt.objects.get(pk=attempt.pk).billed_minutes, job.accrued_micros) == (7, 70_000)
    assert Meter.objects.get(attempt_id=attempt.pk).ended_at is not None
    assert limits.enforce_live_limits() == 0


def test_a_live_attempt_without_a_meter_gets_one_and_the_burn_rate_counts_it():
    org = OrganizationFactory()
    job = _running(org, age=timedelta(minutes=3, seconds=10))
    assert limits.enforce_live_limits() == 1
    attempt = Attempt.objects.get(job=job)
    # As an attempt billed before billing kept meters: its minutes billed, no meter.
    Meter.objects.filter(attempt_id=attempt.pk).delete()
    assert burn_micros_hr(org.pk) == 0

    assert limits.enforce_live_limits() == 1
    meter = Meter.objects.get(attempt_id=attempt.pk)
    assert (meter.ended_at, meter.billed_minutes) == (None, 3)
    assert burn_micros_hr(org.pk) == PRICE
    assert Transfer.objects.filter(attempt=attempt, code="usage").count() == 1  # not twice
    assert limits.enforce_live_limits() == 0


def test_bill_writes_nothing_when_no_whole_minute_moved(org):
    job = _running(org, age=timedelta(minutes=2, seconds=10))
    assert limits.enforce_live_limits() == 1
    job = Job.objects.get(pk=job.pk)
    with CaptureQueriesContext(connection) as queries:
        assert attempts.bill(job) == 20_000
    sql = [q["sql"].lstrip().upper() for q in queries.captured_queries]
    assert not [s for s in sql if s.startswith(WRITES) or "FOR UPDATE" in s]
    assert len(sql) == 2  # the attempts, and whether the live one has its meter


def test_terminate_budgets_and_exhausted_balances_still_end_jobs_in_one_pass():
    spender = OrganizationFactory()
    Budget.objects.create(
        public_id="bud_spender", organization=spender, limit_micros=45_000, action="terminate"
    )  # $0.04 spent, $0.005 left: not one more minute at $0.60/h ($0.01)
    over_budget = _running(spender, age=timedelta(minutes=4, seconds=10))
    broke = OrganizationFactory(credits_usd=2)  # its job holds $1.20: 2 h at $0.60/h
    # $2.00 spent, nothing left for the minute it is in.
    out_of_money = _running(broke, age=timedelta(minutes=200, seconds=10))
    fine = _running(OrganizationFactory(), age=timedelta(minutes=4, seconds=10))

    assert _pass() == (3, 2)

    over_budget.refresh_from_db()
    out_of_money.refresh_from_db()
    fine.refresh_from_db()
    assert (over_budget.state, over_budget.reason) == (JobState.TERMINATING, "budget_exhausted")
    assert "budget of the organization is spent" in (
        over_budget.events.get(type="terminate_requested").message
    )
    assert (out_of_money.state, out_of_money.reason) == (JobState.TERMINATING, "budget_exhausted")
    assert "balance is exhausted" in out_of_money.events.get(type="terminate_requested").message
    assert (fine.state, fine.reason) == (JobState.RUNNING, None)
    assert {s.organization_id for s in budgets.evaluate()} == {spender.pk, broke.pk}
    assert limits.enforce_budgets() == 0  # their jobs are ending already


def test_a_pass_bills_at_most_its_batch_most_urgent_first_and_the_rest_lose_no_minute():
    """Three jobs due and a batch of two: the one whose cost limit binds goes first, then the
    one furthest behind; the third is billed the next pass, every minute of it."""
    org = OrganizationFactory()
    near = _running(org, age=timedelta(minutes=2, seconds=10))
    far = _running(org, age=timedelta(minutes=9, seconds=10))
    capped = _running(org, age=timedelta(minutes=3, seconds=10), limits={"max_cost_usd": 0.03})

    assert limits.enforce_live_limits(batch=2) == 2

    for job in (near, far, capped):
        job.refresh_from_db()
    assert (capped.state, capped.reason) == (JobState.TERMINATING, "max_cost")
    assert Attempt.objects.get(job=far).billed_minutes == 9
    assert Attempt.objects.get(job=near).billed_minutes == 0  # left for the next pass
    assert not Transfer.objects.filter(job=near, code="usage").exists()

    _age(Attempt.objects.get(job=near), timedelta(minutes=3, seconds=10))
    assert limits.enforce_live_limits(batch=2) == 1
    near.refresh_from_db()
    assert Attempt.objects.get(job=near).billed_minutes == 3
    assert near.accrued_micros == 30_000  # all three minutes, posted once
    assert [t.minutes_to for t in Transfer.objects.filter(job=near, code="usage")] == [3]


def test_billing_jobs_together_posts_exactly_what_billing_each_alone_posts():
    together_org, alone_org = OrganizationFactory(), OrganizationFactory()
    age = timedelta(minutes=7, seconds=20)
    together = [_running(together_org, age=age) for _ in range(3)]
    alone = [_running(alone_org, age=age) for _ in range(3)]
    now = timezone.now()

    assert limits._bill_behind([job.pk for job in together], now) == 3
    for job in alone:
        assert limits.enforce_limits(job.pk)

    def books(org) -> dict:
        jobs = Job.objects.filter(organization=org).order_by("pk")
        return {
            "accrued": [job.accrued_micros for job in jobs],
            "live_seq_moved": [job.live_seq > 0 for job in jobs],
            "attempts": list(
                Attempt.objects.filter(job__organization=org)
                .order_by("job_id")
                .values_list("billed_minutes", flat=True)
            ),
            "meters": list(
                Meter.objects.filter(organization=org)
                .order_by("job_id")
                .values_list("billed_minutes", "posted_micros", "ended_at")
            ),
            "usage": list(
                Transfer.objects.filter(organization=org, code="usage")
                .order_by("job_id")
                .values_list("amount_micros", "state", "minutes", "minutes_to")
            ),
            "burn": burn_micros_hr(org.pk),
        }

    assert books(together_org) == books(alone_org)
    assert books(together_org)["usage"] == [(70_000, "posted", 7, 7)] * 3
    wallets = {
        org: Account.objects.get(organization=org, kind="wallet").posted_debits
        for org in (together_org, alone_org)
    }
    assert wallets == {together_org: 210_000, alone_org: 210_000}
    # Again at the same moment: nothing owed, nothing posted twice.
    limits._bill_behind([job.pk for job in together], now)
    assert Transfer.objects.filter(organization=together_org, code="usage").count() == 3
    assert Account.objects.get(organization=together_org, kind="wallet").posted_debits == 210_000


def _bill_together_statements(org, count: int) -> int:
    jobs = [_running(org, age=timedelta(minutes=3, seconds=5)) for _ in range(count)]
    with CaptureQueriesContext(connection) as queries:
        assert limits._bill_behind([job.pk for job in jobs], timezone.now()) == count
    return len(queries)


def test_billing_jobs_together_takes_as_many_statements_for_twelve_as_for_two():
    """Each billed job is pushed to the pages that show it: naming its project's group must
    not read the project one job at a time."""
    org = OrganizationFactory()
    assert _bill_together_statements(org, 12) == _bill_together_statements(org, 2)


def test_jobs_billed_together_push_their_new_spend_only_to_the_pages_watching_them(
    django_capture_on_commit_callbacks,
):
    layer = get_channel_layer()
    org = OrganizationFactory()
    watched, unwatched = (_running(org, age=timedelta(minutes=7, seconds=20)) for _ in range(2))
    channels = {}
    for job in (watched, unwatched):
        channels[job.pk] = async_to_sync(layer.new_channel)()
        async_to_sync(layer.group_add)(push.job_group(job.public_id), channels[job.pk])
    watchers = redis.Redis.from_url(django_settings.REDIS_URL)
    watchers.incr(push.watch_key(push.job_group(watched.public_id)))
    try:
        with django_capture_on_commit_callbacks(execute=True):
            assert limits._bill_behind([watched.pk, unwatched.pk], timezone.now()) == 2

        message = async_to_sync(_receive)(channels[watched.pk], timeout=5)
        assert message["seq"] == Job.objects.get(pk=watched.pk).live_seq
        assert 'data-fact="cost">$0.07<' in message["html"]
        with pytest.raises(TimeoutError):
            async_to_sync(_receive)(channels[unwatched.pk], timeout=0.5)
    finally:
        watchers.delete(push.watch_key(push.job_group(watched.public_id)))


async def _receive(channel: str, timeout: float) -> dict:
    return await asyncio.wait_for(get_channel_layer().receive(channel), timeout=timeout)
