"""Bodies are refused before they are read (config/body_limits.py), on the real server: a
client cannot make the server spool a body it will refuse anyway."""

from __future__ import annotations

import hashlib
import os
import socket
import time

import pytest
import requests

from apps.jobs.execution.tokens import token_for
from apps.jobs.models import Attempt

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

FORTY_MB = 40 * 1024 * 1024


def _post_headers_only(port: int, path: str, length: int, headers: dict[str, str]) -> bytes:
    """Send a POST that announces `length` bytes and sends none of them; return what the
    server answers within 5 seconds (nothing, if it waits for the body)."""
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", f"Content-Length: {length}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        answer = b""
        try:
            while chunk := sock.recv(65536):  # the guard's answer ends with `connection: close`
                answer += chunk
        except TimeoutError:
            pass
        return answer


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/runner/jobs/job_nope/logs",
        "/api/v1/runner/jobs/job_nope/artifacts?kind=checkpoint&step=1",
        "/api/v1/compute/jobs",
        "/api/v1/projects/proj_nope/datasets",
        "/hf/api/models/acme/tiny/commit/main",
        "/accounts/login/",
    ],
)
def test_an_announced_oversize_body_is_refused_before_a_byte_is_read(live_stack, path):
    began = time.monotonic()
    answer = _post_headers_only(
        live_stack.port, path, FORTY_MB, {"Authorization": "Bearer ty_bogus_token"}
    )

    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert time.monotonic() - began < 3
    if path.startswith("/api/"):
        assert b'"payload_too_large"' in answer


def test_a_streamed_body_without_a_length_is_cut_off_at_the_limit(live_stack, settings):
    sent = 0

    def chunks():
        nonlocal sent
        for _ in range(400):  # up to 40 MB, if the server kept reading
            sent += 100_000
            yield b"x" * 100_000

    try:
        answer = requests.post(
            f"{live_stack.url}/api/v1/compute/jobs",
            data=chunks(),
            headers={"Content-Type": "application/json"},
            timeout=30,
        )
        assert answer.status_code == 413
        assert answer.json()["error"]["type"] == "payload_too_large"
    except requests.ConnectionError:
        pass  # the server may close the connection before the client finishes sending
    assert sent < FORTY_MB


def test_a_runner_with_its_token_may_upload_an_artifact_past_the_small_limit(api, live_stack):
    job = api.submit(command=["sleep", "30"])
    api.wait_state(job["id"], "running", timeout=60)
    attempt = Attempt.objects.get(job__public_id=job["id"])
    body = os.urandom(6 * 1024 * 1024)  # over REQUEST_MAX_BYTES (4 MiB by default)

    stored = requests.post(
        f"{live_stack.url}/api/v1/runner/jobs/{job['id']}/artifacts",
        params={"kind": "checkpoint", "step": "1"},
        data=body,
        headers={
            "Authorization": f"Bearer {token_for(attempt.token_nonce)}",
            "Content-Type": "application/gzip",
            "X-Trainyard-SHA256": hashlib.sha256(body).hexdigest(),
        },
        timeout=60,
    )

    assert stored.status_code == 201, stored.text
    assert stored.json()["size_bytes"] == len(body)


def test_an_api_key_may_upload_a_dataset_past_the_small_limit(api, live_stack, compute_org):
    from tests.factories import ProjectFactory

    project = ProjectFactory(organization=compute_org)
    row = b'{"instruction": "Add the numbers", "input": "2 and 3", "output": "5"}\n'
    body = row * (6 * 1024 * 1024 // len(row) + 1)  # over REQUEST_MAX_BYTES (4 MiB)

    stored = api.session.post(
        f"{live_stack.url}/api/v1/projects/{project.public_id}/datasets",
        params={"format": "alpaca", "name": "big"},
        data=body,
        headers={"Content-Type": "application/x-ndjson"},
        timeout=60,
    )

    assert stored.status_code == 201, stored.text
    assert stored.json()["size_bytes"] == len(body)
