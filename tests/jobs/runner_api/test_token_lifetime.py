"""What a runner token may still do once its attempt is over, and how much a job may upload:
the runner endpoints called as the runner calls them (Django test client, a real token, the
real database)."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

import pytest
from django.test import Client
from django.utils import timezone

from apps.jobs import services
from apps.jobs.artifacts import store
from apps.jobs.execution import dispatch, reports, supervision
from apps.jobs.execution.tokens import token_for
from apps.jobs.models import Artifact, Attempt, Job, LogLine
from apps.jobs.runner_api.auth import TOKEN_GRACE_AFTER_END_S
from apps.jobs.states import JobState
from tests.jobs.helpers import make_job

pytestmark = pytest.mark.django_db

BODY = b"\x1f\x8b not really a tar.gz " * 10
SHA = hashlib.sha256(BODY).hexdigest()


@pytest.fixture(autouse=True)
def media(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path / "media"


class Runner:
    def __init__(self, attempt: Attempt) -> None:
        self.attempt = attempt
        self.base = f"/api/v1/runner/jobs/{attempt.job.public_id}/"
        self.client = Client(HTTP_AUTHORIZATION=f"Bearer {token_for(attempt.token_nonce)}")

    def post(self, endpoint: str, body: dict | None = None):
        return self.client.post(self.base + endpoint, body or {}, content_type="application/json")

    def upload(self, step: int, body: bytes = BODY):
        return self.client.post(
            f"{self.base}artifacts?kind=checkpoint&step={step}",
            body,
            content_type="application/gzip",
            HTTP_X_TRAINYARD_SHA256=hashlib.sha256(body).hexdigest(),
        )


def _line(seq: int, message: str, source: str = "user") -> dict:
    return {
        "seq": seq,
        "ts": datetime.now(UTC).isoformat(),
        "source": source,
        "stream": "stdout",
        "message": message,
    }


def _ran_and_ended(org) -> Runner:
    """A job whose workload ran, exited 0 and was finalized: its attempt has ended now."""
    job = make_job(org)
    attempt = dispatch.allocate(job.pk)
    services.job_transition(job_id=job.pk, to=JobState.PROVISIONING)
    reports.runner_started(attempt.pk)
    reports.runner_exited(attempt.pk, 0)
    supervision.finalize(job.pk)
    attempt = Attempt.objects.select_related("job").get(pk=attempt.pk)
    assert attempt.ended_at is not None
    assert Job.objects.get(pk=job.pk).state == JobState.SUCCEEDED
    return Runner(attempt)


def _ended_ago(runner: Runner, seconds: float) -> None:
    Attempt.objects.filter(pk=runner.attempt.pk).update(
        ended_at=timezone.now() - timedelta(seconds=seconds)
    )


def test_inside_the_grace_the_final_flush_still_gets_through(org):
    runner = _ran_and_ended(org)
    _ended_ago(runner, TOKEN_GRACE_AFTER_END_S - 10)

    logs = runner.post("logs", {"lines": [_line(1, "last words")]})
    exited = runner.post("exit", {"exit_code": 0, "last_seq": 1})

    assert logs.status_code == 200 and logs.json()["accepted"] == 1
    assert exited.status_code == 200 and exited.json() == {"ok": True}
    assert runner.upload(step=1).status_code == 201
    assert runner.post("heartbeat").status_code == 409  # as before: the attempt is over


def test_past_the_grace_an_ended_attempts_token_opens_nothing(org):
    runner = _ran_and_ended(org)
    stored = runner.upload(step=1)
    assert stored.status_code == 201
    artifact_pk = int(stored.json()["id"].removeprefix("art_"))
    _ended_ago(runner, TOKEN_GRACE_AFTER_END_S + 1)
    lines_before = LogLine.objects.filter(job=runner.attempt.job).count()

    answers = {
        "logs": runner.post("logs", {"lines": [_line(1, "still here"), _line(2, "sys", "system")]}),
        "heartbeat": runner.post("heartbeat", {"last_seq": 2}),
        "started": runner.post("started", {"pid": 1}),
        "exit": runner.post("exit", {"exit_code": 0, "last_seq": 2}),
        "artifacts": runner.upload(step=2),
        "spec": runner.client.get(runner.base + "spec"),
        "download": runner.client.get(f"{runner.base}artifacts/{artifact_pk}/download"),
    }

    assert {name: answer.status_code for name, answer in answers.items()} == dict.fromkeys(
        answers, 401
    )
    assert {answer.json()["error"]["type"] for answer in answers.values()} == {"unauthenticated"}
    assert LogLine.objects.filter(job=runner.attempt.job).count() == lines_before
    assert Artifact.objects.filter(job=runner.attempt.job).count() == 1


def test_the_grace_can_be_set(org, settings):
    settings.TOKEN_GRACE_AFTER_END_S = 5
    runner = _ran_and_ended(org)
    _ended_ago(runner, 6)
    assert runner.post("logs", {"lines": [_line(1, "x")]}).status_code == 401


def test_a_live_attempts_token_keeps_working_however_old_the_job(org):
    job = make_job(org)
    attempt = dispatch.allocate(job.pk)
    services.job_transition(job_id=job.pk, to=JobState.PROVISIONING)
    Attempt.objects.filter(pk=attempt.pk).update(allocated_at=timezone.now() - timedelta(days=3))
    runner = Runner(Attempt.objects.select_related("job").get(pk=attempt.pk))
    assert runner.post("started", {"pid": 1}).json() == {"order": "continue"}
    assert runner.post("heartbeat").json() == {"order": "continue"}


def test_a_job_holds_at_most_max_artifacts_and_a_repeat_is_still_answered(org):
    runner = _ran_and_ended(org)
    job = runner.attempt.job
    Artifact.objects.bulk_create(
        Artifact(
            job=job,
            attempt=1,
            kind="checkpoint",
            step=step,
            size_bytes=1,
            sha256=SHA,
            storage_path=f"x/{step}",
        )
        for step in range(store.MAX_ARTIFACTS_PER_JOB)
    )

    refused = runner.upload(step=store.MAX_ARTIFACTS_PER_JOB)
    repeat = runner.upload(step=0)

    # 413, as for an artifact too large: today's runners give a 413 up at once.
    assert refused.status_code == 413
    assert refused.json()["error"]["type"] == "too_many_artifacts"
    assert str(store.MAX_ARTIFACTS_PER_JOB) in refused.json()["error"]["message"]
    assert Artifact.objects.filter(job=job).count() == store.MAX_ARTIFACTS_PER_JOB
    assert repeat.status_code == 200  # already stored: nothing new
