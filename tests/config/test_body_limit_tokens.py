"""The body guard (config/body_limits.py) gives the artifact allowance only to the token of
a live attempt of the job: an ended attempt's token, past its grace, is held to
REQUEST_MAX_BYTES and refused before a byte of its body is read."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from django.utils import timezone

from apps.jobs.execution import dispatch
from apps.jobs.execution.tokens import token_for
from apps.jobs.models import Attempt
from apps.jobs.runner_api.auth import TOKEN_GRACE_AFTER_END_S
from config.body_limits import guard_request_bodies
from tests.jobs.helpers import make_job

# Committed rows, as the server sees them: the guard's lookups run outside any request and
# close a connection left in a transaction (database_sync_to_async), as a server's would.
pytestmark = pytest.mark.django_db(transaction=True, serialized_rollback=True)

SIX_MIB = 6 * 1024 * 1024  # over REQUEST_MAX_BYTES (4 MiB), under ARTIFACT_MAX_BYTES


class Upload:
    """The app behind the guard: it reads the body and answers 201 (the upload view's
    answer); `reached` says whether the request got that far."""

    reached = False

    async def __call__(self, scope, receive, send) -> None:
        self.reached = True
        while (await receive()).get("more_body"):
            pass
        await send({"type": "http.response.start", "status": 201, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})


def _upload(job, attempt) -> tuple[int, bytes, bool]:
    inner, sent = Upload(), []
    scope = {
        "type": "http",
        "method": "POST",
        "path": f"/api/v1/runner/jobs/{job.public_id}/artifacts",
        "query_string": b"kind=checkpoint&step=1",
        "headers": [
            (b"authorization", f"Bearer {token_for(attempt.token_nonce)}".encode()),
            (b"content-length", str(SIX_MIB).encode()),
        ],
    }
    chunks = iter([b"x" * (SIX_MIB // 2), b"x" * (SIX_MIB // 2)])

    async def receive() -> dict:
        body = next(chunks, b"")
        return {"type": "http.request", "body": body, "more_body": bool(body)}

    async def send(message: dict) -> None:
        sent.append(message)

    async_to_sync(guard_request_bodies(inner))(scope, receive, send)
    status = next(m for m in sent if m["type"] == "http.response.start")["status"]
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return status, body, inner.reached


def _placed(org):
    job = make_job(org)
    return job, dispatch.allocate(job.pk)


def test_a_live_attempts_token_may_send_an_artifact_past_the_small_limit(org):
    job, attempt = _placed(org)

    status, _, reached = _upload(job, attempt)

    assert (status, reached) == (201, True)


def test_an_expired_attempts_token_is_refused_at_the_small_limit_before_its_body(org):
    job, attempt = _placed(org)
    ended = timezone.now() - timedelta(seconds=TOKEN_GRACE_AFTER_END_S + 60)
    Attempt.objects.filter(pk=attempt.pk).update(ended_at=ended, end_reason="exit_code_0")

    status, body, reached = _upload(job, attempt)

    assert (status, reached) == (413, False)
    assert json.loads(body)["error"]["type"] == "payload_too_large"


def test_a_token_of_another_jobs_attempt_is_refused_at_the_small_limit(org):
    job, _ = _placed(org)
    _, other = _placed(org)

    status, _, reached = _upload(job, other)

    assert (status, reached) == (413, False)
