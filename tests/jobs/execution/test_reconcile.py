"""Reconcile's dispatch of waiting jobs: only when capacity freed (or a sweep is due),
organizations taking turns; and the cap on one organization's waiting jobs."""

from __future__ import annotations

import json
import uuid

import pytest
import redis
from django.test import Client

from apps.accounts import services as account_services
from apps.catalog.models import Offer
from apps.jobs.execution import attempts, capacity, dispatch, reconcile
from apps.jobs.models import Attempt, Job
from apps.jobs.states import JobState
from tests.jobs.helpers import job_body, make_job

pytestmark = pytest.mark.django_db(transaction=True, serialized_rollback=True)


@pytest.fixture
def broker(settings):
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    client.delete("celery", capacity.EPOCH_KEY, capacity.SEEN_KEY, capacity.SWEPT_KEY)
    yield client
    client.delete("celery", capacity.EPOCH_KEY, capacity.SEEN_KEY, capacity.SWEPT_KEY)


def _dispatched(client: redis.Redis) -> list[int]:
    """The job ids of the dispatch messages queued since the last look (taken off)."""
    ids = []
    while raw := client.rpop("celery"):
        headers = json.loads(raw)["headers"]
        if headers["task"] == "jobs.dispatch_job":
            ids.append(json.loads(headers["argsrepr"])[0])
    return ids


def test_waiting_jobs_are_dispatched_again_only_when_capacity_frees(org, other_org, broker):
    Offer.objects.filter(provider__name="local").update(capacity=1)
    running = make_job(org)
    dispatch.allocate(running.pk)
    backlog = [make_job(org).pk for _ in range(30)]
    theirs = make_job(other_org).pk
    _dispatched(broker)  # what creating them enqueued

    reconcile.reconcile()
    first_pass = _dispatched(broker)
    reconcile.reconcile()
    second_pass = _dispatched(broker)
    attempts.end_attempt(Attempt.objects.get(job=running), reason="exit_code_0", exit_code=0)
    reconcile.reconcile()
    after_freeing = _dispatched(broker)

    assert first_pass[:2] == [backlog[0], theirs]  # organizations take turns
    assert sorted(first_pass) == sorted([*backlog, theirs])
    assert second_pass == []  # nothing changed: no dispatch storm
    assert after_freeing[:2] == [backlog[0], theirs]


def test_a_pass_dispatches_at_most_a_batch(org, broker, settings):
    settings.RECONCILE_DISPATCH_BATCH = 5
    Offer.objects.filter(provider__name="local").update(capacity=0)
    for _ in range(12):
        make_job(org)
    _dispatched(broker)

    reconcile.reconcile()

    assert len(_dispatched(broker)) == 5


def test_an_organization_may_keep_only_so_many_jobs_waiting(org, other_org, settings, broker):
    settings.MAX_WAITING_JOBS_PER_ORG = 3
    Offer.objects.filter(provider__name="local").update(capacity=0)
    _, key = account_services.api_key_create(organization=org, name="it")
    client = Client(HTTP_AUTHORIZATION=f"Bearer {key}")

    def submit():
        return client.post(
            "/api/v1/compute/jobs",
            job_body(),
            content_type="application/json",
            HTTP_IDEMPOTENCY_KEY=uuid.uuid4().hex,
        )

    answers = [submit().status_code for _ in range(3)]
    refused = submit()

    assert answers == [201, 201, 201]
    assert refused.status_code == 429
    assert refused.json()["error"]["type"] == "waiting_jobs_limit"
    assert Job.objects.filter(organization=org).count() == 3
    assert make_job(other_org).state == JobState.REQUESTED  # others are not affected
