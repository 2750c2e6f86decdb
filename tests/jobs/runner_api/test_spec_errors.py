"""A spec that can never be served (a secret the job names was deleted, or lost the key) fails
the job at once, saying which secret and key, never a value; the runner is told to stop
(409 attempt_superseded: it exits 0 without starting anything) instead of retrying until it
is declared lost and placed again. Called as the runner calls it (Django test client, a real
token, the real database)."""

from __future__ import annotations

import pytest
from django.test import Client

from apps.jobs import services
from apps.jobs.execution import dispatch, reports
from apps.jobs.execution.tokens import token_for
from apps.jobs.models import Attempt, Job, JobEvent, LogLine
from apps.jobs.states import JobState
from apps.secrets import services as secret_services
from runner.client import Outcome, classify
from tests.jobs.helpers import make_job

pytestmark = pytest.mark.django_db

VALUE = "hf_kept-S3cret-value"
OTHER_VALUE = "wandb-0ther-value"


def _job_with_secrets(org):
    hub = secret_services.secret_create(organization=org, name="hub", data={"HF": VALUE})
    wandb = secret_services.secret_create(organization=org, name="wandb", data={"KEY": OTHER_VALUE})
    job = make_job(
        org,
        container={
            "image": "img",
            "command": ["python", "train.py"],
            "secret_env": {
                "HF_TOKEN": {"secret_id": hub.public_id, "key": "HF"},
                "WANDB_API_KEY": {"secret_id": wandb.public_id, "key": "KEY"},
            },
        },
    )
    attempt = dispatch.allocate(job.pk)
    services.job_transition(job_id=job.pk, to=JobState.PROVISIONING)
    client = Client(HTTP_AUTHORIZATION=f"Bearer {token_for(attempt.token_nonce)}")
    return job, attempt, client, hub, wandb


def _spec(client, job):
    return client.get(f"/api/v1/runner/jobs/{job.public_id}/spec")


def _everything_said(job) -> str:
    events = JobEvent.objects.filter(job=job).values_list("message", "data")
    lines = LogLine.objects.filter(job=job).values_list("message", flat=True)
    return repr(list(events)) + repr(list(lines)) + repr(Job.objects.get(pk=job.pk).__dict__)


def test_a_deleted_secret_fails_the_job_at_once_naming_the_secret_and_key(org):
    job, attempt, client, hub, _ = _job_with_secrets(org)
    assert _spec(client, job).status_code == 200
    secret_services.secret_delete(secret=hub)

    answer = _spec(client, job)

    assert answer.status_code == 409
    assert answer.json()["error"]["type"] == "attempt_superseded"
    assert classify(answer.status_code, answer.json()) is Outcome.SUPERSEDED  # runner exits 0
    job.refresh_from_db()
    assert (job.state, job.reason) == (JobState.FAILED, "secret_missing")
    assert hub.public_id in job.error_message and "'HF'" in job.error_message
    failed = JobEvent.objects.filter(job=job, type="state_changed").last()
    assert failed.data["to"] == "failed" and failed.data["reason"] == "secret_missing"
    assert (failed.data["env"], failed.data["secret_id"], failed.data["key"]) == (
        "HF_TOKEN",
        hub.public_id,
        "HF",
    )
    assert hub.public_id in failed.message and "HF_TOKEN" in failed.message
    system = list(
        LogLine.objects.filter(job=job, source="system").values_list("message", flat=True)
    )
    assert any(hub.public_id in line and "'HF'" in line for line in system)
    ended = Attempt.objects.get(pk=attempt.pk)
    assert ended.ended_at is not None and ended.end_reason == "secret_missing"
    said = _everything_said(job)
    assert VALUE not in said and OTHER_VALUE not in said

    # Nothing is placed again, and the runner's retries change nothing.
    assert dispatch.allocate(job.pk) is None
    assert _spec(client, job).status_code == 409
    assert Job.objects.get(pk=job.pk).preemption_count == 0
    assert JobEvent.objects.filter(job=job, data__reason="secret_missing").count() == 1


def test_a_key_removed_from_a_secret_fails_the_job_the_same_way(org):
    job, _, client, _, wandb = _job_with_secrets(org)
    secret_services.secret_replace(secret=wandb, data={"RENAMED": OTHER_VALUE})

    answer = _spec(client, job)

    assert answer.status_code == 409
    job.refresh_from_db()
    assert (job.state, job.reason) == (JobState.FAILED, "secret_missing")
    failed = JobEvent.objects.filter(job=job, type="state_changed").last()
    assert (failed.data["env"], failed.data["secret_id"], failed.data["key"]) == (
        "WANDB_API_KEY",
        wandb.public_id,
        "KEY",
    )
    said = _everything_said(job)
    assert VALUE not in said and OTHER_VALUE not in said


def test_a_running_job_whose_runner_asks_again_fails_through_finalizing(org):
    job, attempt, client, hub, _ = _job_with_secrets(org)
    reports.runner_started(attempt.pk)
    secret_services.secret_delete(secret=hub)

    assert _spec(client, job).status_code == 409

    changes = [
        (e.data["from"], e.data["to"])
        for e in JobEvent.objects.filter(job=job, type="state_changed").order_by("id")
    ]
    assert changes[-2:] == [("running", "finalizing"), ("finalizing", "failed")]


def test_a_job_being_terminated_is_left_to_end_terminated(org):
    job, _, client, hub, _ = _job_with_secrets(org)
    services.job_terminate(job=job)
    secret_services.secret_delete(secret=hub)

    assert _spec(client, job).status_code == 409

    job.refresh_from_db()
    assert (job.state, job.reason) == (JobState.TERMINATING, "cancelled")
