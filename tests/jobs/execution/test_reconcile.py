"""Reconcile's dispatch of waiting jobs: only when capacity freed (or a sweep is due),
organizations taking turns; the cap on one organization's waiting jobs; and its supervision
of every live attempt at once (one query, one poll_many per provider), with real runner
processes on the local host runtime."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import uuid
from datetime import timedelta

import pytest
import redis
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from apps.accounts import services as account_services
from apps.catalog.models import Offer
from apps.jobs import services
from apps.jobs.execution import attempts, capacity, dispatch, reconcile, reports, supervision
from apps.jobs.models import Attempt, Job
from apps.jobs.states import JobState
from runner import procfs
from tests.jobs.helpers import job_body, make_job, running, submit_on

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


@pytest.fixture
def runners(tmp_path):
    """Start stand-in runner processes (real process groups, as the host runtime starts
    them) and give their handles; every one still there is killed at the end."""
    started: list[subprocess.Popen] = []

    def start(name: str, argv: list[str], exit_code: int | None = None) -> dict:
        """A runner in `tmp_path/name` running `argv`; one that already ended when `argv`
        ends by itself, with an exit record of `exit_code` when given."""
        workdir = tmp_path / name
        workdir.mkdir()
        process = subprocess.Popen(argv, start_new_session=True)
        started.append(process)
        info = procfs.stat(process.pid)
        handle = {
            "pid": process.pid,
            "pgid": process.pid,
            "start_ticks": info.start_ticks,
            "workdir": str(workdir),
        }
        if argv[0] == "true":
            process.wait(timeout=10)
        if exit_code is not None:
            (workdir / "exit.json").write_text(json.dumps({"exit_code": exit_code}))
        return handle

    start.processes = started
    yield start
    for process in started:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _job(attempt: Attempt) -> Job:
    return Job.objects.get(pk=attempt.job_id)


def test_one_pass_moves_each_live_attempt_by_its_own_poll(org, slots, runners, broker):
    slots(8)
    alive = running(submit_on(org, slots), handle=runners("alive", ["sleep", "60"]))
    succeeded = running(submit_on(org, slots), handle=runners("ok", ["true"], exit_code=0))
    failed = running(submit_on(org, slots), handle=runners("failed", ["true"], exit_code=3))
    lost = running(submit_on(org, slots), handle=runners("lost", ["true"]))
    # A handle no poll can read: its error is its own, the others are still supervised.
    broken = running(submit_on(org, slots), handle={"workdir": "/nowhere"})
    stopping = running(submit_on(org, slots), handle=runners("stopping", ["sleep", "60"]))
    services.job_terminate(job=_job(stopping))

    result = reconcile.reconcile()

    assert result["supervised"] == 6
    assert (_job(alive).state, Attempt.objects.get(pk=alive.pk).ended_at) == ("running", None)
    assert (_job(succeeded).state, _job(succeeded).exit_code) == ("succeeded", 0)
    assert (_job(failed).state, _job(failed).exit_code) == ("failed", 3)
    assert (_job(lost).state, _job(lost).reason) == ("preempted", "reclaimed")
    assert Attempt.objects.get(pk=lost.pk).end_reason == "reclaimed"
    assert (_job(broken).state, Attempt.objects.get(pk=broken.pk).ended_at) == ("running", None)
    # Told to stop before it was polled; once it is gone, the next pass ends the job.
    assert Attempt.objects.get(pk=stopping.pk).terminate_requested_at is not None
    [stopped] = [p for p in runners.processes if p.pid == stopping.handle["pid"]]
    stopped.wait(timeout=15)
    reconcile.reconcile()
    assert _job(stopping).state == "terminated"
    assert _job(alive).state == "running"


def test_supervising_live_attempts_costs_no_query_per_attempt(org, slots, runners):
    slots(8)
    for index in range(4):
        running(submit_on(org, slots), handle=runners(f"alive-{index}", ["sleep", "60"]))
    with CaptureQueriesContext(connection) as loading:
        live = reconcile.live_attempts()

    with CaptureQueriesContext(connection) as queries:
        polled = supervision.supervise_many(live)

    assert polled == 4
    assert len(loading) == 2  # the attempts with their jobs, then their one provider
    # Running and beating: nothing to write, nothing to re-read, no field the pass left
    # in the database read one attempt at a time.
    assert len(queries) == 0


def test_a_silent_runner_that_just_beat_is_not_killed(org, slots, runners, settings):
    """The pass loaded the attempt before its heartbeat came: the heartbeat is read again
    before the runner is judged silent."""
    settings.HEARTBEAT_TIMEOUT_S = 1
    slots(1)
    attempt = running(submit_on(org, slots), handle=runners("late", ["sleep", "60"]))
    stale = timezone.now() - timedelta(seconds=5)
    Attempt.objects.filter(pk=attempt.pk).update(last_heartbeat_at=stale)
    live = list(Attempt.objects.filter(pk=attempt.pk).select_related("provider", "job"))
    reports.runner_heartbeat(attempt.pk)  # the beat arrives after the pass's query

    supervision.supervise_many(live)

    attempt.refresh_from_db()
    assert (attempt.reclaim_reason, attempt.terminate_requested_at) == ("", None)
    assert procfs.alive(attempt.handle["pid"], attempt.handle["start_ticks"])


def test_a_pass_lock_left_by_a_killed_worker_lapses_within_thirty_seconds(settings, monkeypatch):
    """A worker killed mid-pass never releases the pass's lock: it must lapse on its own
    soon, or supervision (stalled launches, exits, limits) stops for as long as it holds."""
    import redis

    from apps.jobs import tasks

    held_for_ms = []

    def a_pass() -> dict:
        client = redis.Redis.from_url(settings.REDIS_URL)
        held_for_ms.append(client.pttl("trainyard:reconcile"))
        return {}

    monkeypatch.setattr(tasks.reconcile_loop, "reconcile", a_pass)
    settings.RECONCILE_INTERVAL_S = 5
    tasks.reconcile()

    assert len(held_for_ms) == 1
    assert 0 < held_for_ms[0] <= 30_000
