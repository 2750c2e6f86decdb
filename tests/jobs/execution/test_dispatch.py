"""Dispatch without a worker: the task bodies called directly against the real database."""

import threading

import psycopg
import pytest
from django.db import connection

from apps.catalog.models import Accelerator, Offer
from apps.core import leases
from apps.jobs.execution import dispatch
from apps.jobs.models import Attempt, Job, JobEvent, LogLine
from apps.jobs.states import JobState
from apps.providers.models import Provider
from tests.jobs.helpers import make_job
from tests.live import wait_until

pytestmark = pytest.mark.django_db


def _offer(name, *, price, capacity=1, kind="local", config=None):
    provider = Provider.objects.create(name=name, kind=kind, config=config or {})
    return Offer.objects.create(
        provider=provider,
        accelerator=Accelerator.objects.get(name="cpu"),
        gpu_counts=[1],
        capacity=capacity,
        price_per_gpu_hour_micros=price,
        min_price_per_gpu_hour_micros=price,
        max_price_per_gpu_hour_micros=price,
    )


def test_allocate_takes_the_cheapest_offer_with_room_and_captures_its_price(org):
    cheap = _offer("cheap", price=50_000)
    job = make_job(org)
    attempt = dispatch.allocate(job.pk)
    job.refresh_from_db()
    assert (job.state, job.attempt_count) == (JobState.ALLOCATING, 1)
    assert job.allocated_at == attempt.allocated_at
    assert (attempt.offer, attempt.provider.name, attempt.price_micros_hr) == (
        cheap,
        "cheap",
        50_000,
    )
    assert JobEvent.objects.filter(job=job, type="provider_allocated").count() == 1
    assert (
        LogLine.objects.filter(job=job, source="system")
        .first()
        .message.startswith("allocated cheap: cpu x1 at $0.05/h")
    )


def test_a_full_offer_is_skipped_for_the_next_cheapest(org):
    _offer("cheap", price=50_000, capacity=1)
    first, second = make_job(org), make_job(org)
    assert dispatch.allocate(first.pk).provider.name == "cheap"
    assert dispatch.allocate(second.pk).provider.name == "local"


def test_without_capacity_the_job_waits_and_says_so_once(org, settings):
    Offer.objects.update(capacity=0)
    job = make_job(org)
    assert dispatch.allocate(job.pk) is None
    assert dispatch.allocate(job.pk) is None
    job.refresh_from_db()
    assert job.state == JobState.REQUESTED
    assert JobEvent.objects.filter(job=job, type="waiting_for_capacity").count() == 1
    assert not Attempt.objects.exists()


def test_a_job_waiting_past_the_timeout_fails_no_capacity(org, settings):
    settings.NO_CAPACITY_TIMEOUT_S = 0
    Offer.objects.update(capacity=0)
    job = make_job(org)
    dispatch.dispatch(job.pk)
    job.refresh_from_db()
    assert (job.state, job.reason) == (JobState.FAILED, "no_capacity")


def test_a_ceiling_under_the_price_now_waits_for_the_price_to_fall(org):
    band = _offer("band", price=60_000)
    Offer.objects.filter(pk=band.pk).update(min_price_per_gpu_hour_micros=40_000)
    Offer.objects.exclude(pk=band.pk).update(enabled=False)
    job = make_job(org, limits={"max_price_usd_hr": 0.05})
    assert dispatch.allocate(job.pk) is None
    Offer.objects.filter(pk=band.pk).update(price_per_gpu_hour_micros=50_000)
    assert dispatch.allocate(job.pk).provider.name == "band"


def test_a_provider_without_a_backend_fails_the_job_launch_failed(org):
    _offer("elsewhere", price=1, kind="kubernetes")
    job = make_job(org)
    dispatch.dispatch(job.pk)
    job.refresh_from_db()
    assert (job.state, job.reason) == (JobState.FAILED, "launch_failed")
    attempt = Attempt.objects.get(job=job)
    assert attempt.ended_at is not None
    assert Offer.objects.get(provider__name="elsewhere").attempts.filter(ended_at=None).count() == 0


def test_a_dispatch_that_keeps_crashing_ends_the_job_dispatch_crash(org, settings):
    settings.DISPATCH_MAX_DELIVERIES = 3
    # A real crash: the backend cannot create its work directory under /proc.
    _offer("broken", price=1, config={"work_dir": "/proc/trainyard-cannot-write-here"})
    job = make_job(org)
    for _ in range(3):
        with pytest.raises(OSError):
            dispatch.dispatch(job.pk)
    job.refresh_from_db()
    assert job.state == JobState.PROVISIONING
    dispatch.dispatch(job.pk)
    job.refresh_from_db()
    assert (job.state, job.reason) == (JobState.FAILED, "dispatch_crash")
    assert Attempt.objects.get(job=job).ended_at is not None


def _another_session():
    """A database session of its own, as another worker process would have."""
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    return psycopg.connect(**params, autocommit=True)


def _lease_held(job) -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = %s"
            " AND objid = %s AND objsubid = 2 AND granted"
            " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            [leases.DISPATCH, job.pk],
        )
        return cursor.fetchone()[0] > 0


def _try_dispatch_lease(session, job) -> bool:
    return session.execute(
        "SELECT pg_try_advisory_lock(%s, %s)", [leases.DISPATCH, job.pk]
    ).fetchone()[0]


def test_a_delivery_while_a_live_worker_dispatches_the_job_leaves_it_alone(org):
    _offer("elsewhere", price=1, kind="kubernetes")
    job = make_job(org)
    with _another_session() as worker:
        assert _try_dispatch_lease(worker, job)  # that worker is placing the job
        dispatch.dispatch(job.pk)
        job.refresh_from_db()
        assert (job.state, job.dispatch_deliveries) == (JobState.REQUESTED, 0)
        assert not Attempt.objects.filter(job=job).exists()
    # That worker died: its session closed (its backend lets go of the lock as it exits, a
    # moment after the client hangs up), and the next delivery takes the job up.
    wait_until(lambda: not _lease_held(job), timeout=10, what="the dead session's lease")
    dispatch.dispatch(job.pk)
    job.refresh_from_db()
    assert (job.state, job.reason) == (JobState.FAILED, "launch_failed")


def test_a_dispatch_that_crashed_lets_go_of_the_job(org):
    _offer("broken", price=1, config={"work_dir": "/proc/trainyard-cannot-write-here"})
    job = make_job(org)
    with pytest.raises(OSError):
        dispatch.dispatch(job.pk)
    with _another_session() as worker:
        assert _try_dispatch_lease(worker, job)


def test_a_dispatch_of_a_job_that_moved_on_does_nothing(org):
    job = make_job(org, state=JobState.TERMINATED)
    dispatch.dispatch(job.pk)
    assert Job.objects.get(pk=job.pk).dispatch_deliveries == 0
    assert not Attempt.objects.exists()


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_two_dispatches_racing_for_the_last_slot_allocate_once(org):
    Offer.objects.update(capacity=1)
    jobs = [make_job(org), make_job(org)]
    barrier = threading.Barrier(2)
    results = []

    def run(job_pk):
        barrier.wait()
        results.append(dispatch.allocate(job_pk))
        connection.close()

    threads = [threading.Thread(target=run, args=(job.pk,)) for job in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(1 for r in results if r is not None) == 1
    assert Attempt.objects.filter(ended_at=None).count() == 1
    assert sorted(Job.objects.values_list("state", flat=True)) == ["allocating", "requested"]
