"""`apps.jobs.outcomes`: how sweeps and webhooks learn that a job ended. An ended or preempted
job queues `jobs.job_outcome` after its write commits (a rolled-back one queues nothing), and
that task calls every outcome hook, one failing hook not stopping the rest."""

import json

import pytest
import redis
from django.db import transaction

from apps.jobs import outcomes, services, tasks
from apps.jobs.states import JobState
from tests.jobs.helpers import make_job
from tests.jobs.test_enqueue import queue_left_alone  # noqa: F401


def _outcomes(client: redis.Redis, job_id: int) -> list[str]:
    """The `jobs.job_outcome` messages for `job_id` in the default queue, taken out of it."""
    found = []
    for raw in client.lrange("celery", 0, -1):
        headers = json.loads(raw)["headers"]
        if headers["task"] == "jobs.job_outcome" and headers["argsrepr"].startswith(f"[{job_id},"):
            found.append(headers["argsrepr"])
            client.lrem("celery", 0, raw)
    return found


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_an_ended_or_preempted_job_queues_its_outcome_after_commit_only(
    org,
    settings,
    queue_left_alone,  # noqa: F811
):
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    failed = make_job(org)
    preempted = make_job(org, state=JobState.RUNNING)
    rolled_back = make_job(org)
    still_running = make_job(org, state=JobState.PROVISIONING)

    services.job_transition(job_id=failed.pk, to=JobState.FAILED, reason="no_capacity")
    services.job_transition(job_id=preempted.pk, to=JobState.PREEMPTED)
    services.job_transition(job_id=still_running.pk, to=JobState.RUNNING)
    with pytest.raises(RuntimeError), transaction.atomic():
        services.job_transition(job_id=rolled_back.pk, to=JobState.FAILED)
        raise RuntimeError("rolled back")

    assert _outcomes(client, failed.pk) == [f"[{failed.pk}, 'failed']"]
    assert _outcomes(client, preempted.pk) == [f"[{preempted.pk}, 'preempted']"]
    assert _outcomes(client, rolled_back.pk) == []
    assert _outcomes(client, still_running.pk) == []


def broken_hook(job, state):
    raise RuntimeError("a hook's bug")


heard: list[tuple[str, str]] = []


def listening_hook(job, state):
    heard.append((job.public_id, state))


@pytest.mark.django_db
def test_the_task_calls_every_hook_even_past_a_failing_one(org, monkeypatch):
    job = make_job(org, state=JobState.FAILED)
    here = __name__
    monkeypatch.setattr(
        outcomes, "OUTCOME_HOOKS", [f"{here}.broken_hook", f"{here}.listening_hook"]
    )
    heard.clear()

    tasks.job_outcome(job.pk, JobState.FAILED)
    tasks.job_outcome(10**12, JobState.FAILED)  # a job deleted since: no hook called

    assert heard == [(job.public_id, "failed")]
