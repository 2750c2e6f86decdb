"""Log batches sent gzipped (`Content-Encoding: gzip`, docs/runner-protocol.md): stored like
plain ones; a body that unpacks past the limit, is not gzip, is cut short or has bytes after
it, or names another encoding is refused with its error type and stores nothing. Through
the real runner endpoint and real PostgreSQL."""

from __future__ import annotations

import gzip
import json
import zlib
from datetime import UTC, datetime

import pytest
from django.test import Client, override_settings

from apps.jobs import services
from apps.jobs.execution import dispatch
from apps.jobs.execution.tokens import token_for
from apps.jobs.models import Job, LogLine
from apps.jobs.states import JobState
from tests.jobs.helpers import make_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def attempt(org):
    job = make_job(org)
    allocated = dispatch.allocate(job.pk)
    services.job_transition(job_id=job.pk, to=JobState.PROVISIONING)
    return allocated


def _client(attempt) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {token_for(attempt.token_nonce)}")


def _batch(messages: list[str], first_seq: int = 1) -> bytes:
    now = datetime.now(UTC).isoformat()
    lines = [
        {"seq": seq, "ts": now, "source": "user", "stream": "stdout", "message": message}
        for seq, message in enumerate(messages, start=first_seq)
    ]
    return json.dumps({"lines": lines}).encode()


def _post(attempt, body: bytes, encoding: str | None = "gzip"):
    headers = {} if encoding is None else {"HTTP_CONTENT_ENCODING": encoding}
    return _client(attempt).post(
        f"/api/v1/runner/jobs/{attempt.job.public_id}/logs",
        body,
        content_type="application/json",
        **headers,
    )


def _stored(attempt) -> list[str]:
    rows = LogLine.objects.filter(job_id=attempt.job_id, source="user").order_by("seq")
    return list(rows.values_list("message", flat=True))


def test_a_gzipped_batch_is_stored_like_a_plain_one(attempt):
    messages = [f"step {n}: loss 0.{n:04d}" for n in range(3000)]
    body = _batch(messages)
    packed = gzip.compress(body, compresslevel=1)
    assert len(packed) < len(body) / 4

    response = _post(attempt, packed)

    assert response.status_code == 200, response.content
    assert response.json() == {"accepted": 3000, "duplicates": 0, "order": "continue"}
    assert _stored(attempt) == messages
    assert Job.objects.get(pk=attempt.job_id).user_log_lines == 3000
    # The same batch again, this time plain: every line a duplicate, nothing stored twice.
    again = _post(attempt, body, encoding=None)
    assert again.json() == {"accepted": 0, "duplicates": 3000, "order": "continue"}
    assert _stored(attempt) == messages


@override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=200_000)
def test_a_body_that_unpacks_past_the_limit_is_413_and_stores_nothing(attempt):
    # 2 MB of one repeated line packs to a few kilobytes: a "zip bomb" in small.
    body = _batch(["A" * 16_000] * 125)
    packed = gzip.compress(body, compresslevel=9)
    assert len(packed) < 20_000 < 200_000 < len(body)

    response = _post(attempt, packed)

    assert response.status_code == 413, response.content
    assert response.json()["error"]["type"] == "payload_too_large"
    assert _stored(attempt) == []


@override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=200_000)
def test_a_body_that_unpacks_to_just_under_the_limit_is_stored(attempt):
    body = _batch(["B" * 1_000] * 150)
    assert 150_000 < len(body) <= 200_000

    response = _post(attempt, gzip.compress(body))

    assert response.status_code == 200, response.content
    assert len(_stored(attempt)) == 150


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"this is not gzip at all", id="not-gzip"),
        pytest.param(gzip.compress(_batch(["cut"]))[:-6], id="cut-short"),
        pytest.param(gzip.compress(_batch(["one"])) + b"trailing", id="bytes-after-it"),
        pytest.param(zlib.compress(_batch(["zlib"])), id="zlib-not-gzip"),
        pytest.param(b"", id="empty"),
    ],
)
def test_a_body_that_is_not_one_whole_gzip_member_is_400(attempt, body):
    response = _post(attempt, body)

    assert response.status_code == 400, response.content
    assert response.json()["error"]["type"] == "invalid_request"
    assert _stored(attempt) == []


def test_gzipped_bytes_that_are_not_json_are_400(attempt):
    response = _post(attempt, gzip.compress(b'{"lines": [ oops'))

    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request"


def test_another_encoding_is_415_and_stores_nothing(attempt):
    response = _post(attempt, _batch(["brotli?"]), encoding="br")

    assert response.status_code == 415, response.content
    assert response.json()["error"]["type"] == "unsupported_media_type"
    assert "br" in response.json()["error"]["message"]
    assert _stored(attempt) == []


def test_identity_is_a_plain_body(attempt):
    response = _post(attempt, _batch(["plain"]), encoding="identity")

    assert response.status_code == 200
    assert _stored(attempt) == ["plain"]


def test_the_spec_tells_the_runner_from_what_size_to_gzip(attempt):
    url = f"/api/v1/runner/jobs/{attempt.job.public_id}/spec"
    assert _client(attempt).get(url).json()["log_gzip_min_bytes"] == 32 * 1024
    with override_settings(LOG_GZIP_MIN_BYTES=-1):
        assert _client(attempt).get(url).json()["log_gzip_min_bytes"] is None
