"""A reconcile pass never waits on a job's row: a job whose row another transaction holds
(its runner's log batch being stored, a relay's bundle holding dozens) is billed a pass
later, with every minute it owes. Two real connections to PostgreSQL."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from apps.jobs import services
from apps.jobs.execution import dispatch, limits
from apps.jobs.models import Attempt, Job
from apps.jobs.states import JobState
from tests.factories import OrganizationFactory
from tests.jobs.helpers import make_job

pytestmark = pytest.mark.django_db(transaction=True, serialized_rollback=True)

COMPUTE = {"accelerator": "nvidia-a100-80gb", "gpu_count": 1, "ephemeral_disk_gb": 10}


@pytest.fixture(autouse=True)
def roomy(make_offer, settings):
    settings.TRAINYARD_CLOCK_SCALE = 1
    offer = make_offer("roomy-cloud", "nvidia-a100-80gb", price=600_000, capacity=10)
    offer.provider.config = {"multi_tenant": True, "isolation": "users"}
    offer.provider.save()


def _running_for_five_minutes(org) -> Job:
    job = make_job(org, compute=COMPUTE)
    attempt = dispatch.allocate(job.pk)
    for step in (JobState.PROVISIONING, JobState.RUNNING):
        services.job_transition(job_id=job.pk, to=step)
    ago = timezone.now() - timedelta(minutes=5, seconds=10)
    Attempt.objects.filter(pk=attempt.pk).update(allocated_at=ago, billing_started_at=ago)
    return job


def _hold(job: Job, held: threading.Event, release: threading.Event) -> None:
    try:
        with transaction.atomic():
            Job.objects.select_for_update(no_key=True).get(pk=job.pk)
            held.set()
            release.wait(30)
    finally:
        connection.close()


def _billed_minutes(job: Job) -> int:
    return Attempt.objects.get(job=job).billed_minutes


def test_a_job_whose_row_is_held_is_skipped_then_billed_next_pass():
    org = OrganizationFactory()
    free, held_job = _running_for_five_minutes(org), _running_for_five_minutes(org)
    held, release = threading.Event(), threading.Event()
    holder = threading.Thread(target=_hold, args=(held_job, held, release))
    holder.start()
    assert held.wait(10)
    try:
        billed = limits.enforce_live_limits()  # would wait 30 s for the row without skipping
        still_held = not release.is_set() and holder.is_alive()
    finally:
        release.set()
        holder.join(10)

    assert (billed, still_held) == (1, True)
    assert (_billed_minutes(free), _billed_minutes(held_job)) == (5, 0)
    assert limits.enforce_live_limits() == 1  # the next pass
    assert _billed_minutes(held_job) == 5
