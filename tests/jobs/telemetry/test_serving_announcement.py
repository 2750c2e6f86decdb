"""A serve job's stdout is read for its engine's `{"type": "serving", "port": N}` line; any
other line that merely mentions "serving" (JSON that is not an object included) is a log line
like the rest: the batch is stored, never refused (a refused batch is resent forever)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.test import Client

from apps.jobs import services
from apps.jobs.execution import dispatch
from apps.jobs.execution.tokens import token_for
from apps.jobs.models import Attempt, Job, LogLine
from apps.jobs.states import JobState
from tests.jobs.helpers import make_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def serve_job(org):
    job = make_job(org)
    attempt = dispatch.allocate(job.pk)
    services.job_transition(job_id=job.pk, to=JobState.PROVISIONING)
    Job.objects.filter(pk=job.pk).update(kind=Job.Kind.SERVE)
    return Job.objects.get(pk=job.pk), attempt


def _send(job, attempt, messages: list[str]):
    lines = [
        {
            "seq": seq,
            "ts": datetime.now(UTC).isoformat(),
            "source": "user",
            "stream": "stdout",
            "message": message,
        }
        for seq, message in enumerate(messages, start=1)
    ]
    return Client(HTTP_AUTHORIZATION=f"Bearer {token_for(attempt.token_nonce)}").post(
        f"/api/v1/runner/jobs/{job.public_id}/logs",
        {"lines": lines},
        content_type="application/json",
    )


@pytest.mark.parametrize(
    "odd",
    ['"serving"', '["serving", 8000]', '[{"type": "serving", "port": 8000}]'],
)
def test_a_non_object_json_line_mentioning_serving_is_stored_with_its_batch(serve_job, odd):
    job, attempt = serve_job
    messages = ["engine starting", odd, "loading weights", '{"serving": true}']

    response = _send(job, attempt, messages)

    assert response.status_code == 200, response.content
    stored = LogLine.objects.filter(job=job, source="user").order_by("seq")
    assert list(stored.values_list("message", flat=True)) == messages
    assert Attempt.objects.get(pk=attempt.pk).service_port is None


def test_the_real_announcement_after_an_odd_line_still_counts(serve_job):
    job, attempt = serve_job

    response = _send(job, attempt, ['"serving"', '{"type": "serving", "port": 8123}'])

    assert response.status_code == 200, response.content
    assert Attempt.objects.get(pk=attempt.pk).service_port == 8123
