"""The runner door on the real server (config/admission.py): connections that send a runner
path's headers and no body (anonymous, with a signed token of no live attempt, or a relay's
bundle) never hold a runner slot, so a tenant's heartbeat still gets through at once; slow
bodies are cut off (408) and one address may keep only so many waiting (429).

A web process of its own, with two runner slots, so a few connections would have been
enough to fill them; each attacking address is a loopback address of its own (127.0.0.x),
the tenant's runner is 127.0.0.1."""

from __future__ import annotations

import json
import selectors
import socket
import time

import pytest
import requests
from django.conf import settings

from apps.jobs import services
from apps.jobs.execution import dispatch
from apps.jobs.execution.tokens import token_for
from apps.jobs.states import JobState
from tests.conftest import _test_database_url
from tests.integration.stack import Stack
from tests.jobs.helpers import make_job

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

QUEUE_TIMEOUT_S = 4.0
BODY_TIMEOUT_S = 2.0
PENDING_PER_CLIENT = 4
DOOR = {
    "RUNNER_MAX_CONCURRENT": "2",
    "RUNNER_QUEUE_TIMEOUT_S": str(QUEUE_TIMEOUT_S),
    "RUNNER_BODY_TIMEOUT_S": str(BODY_TIMEOUT_S),
    "RUNNER_MAX_PENDING_PER_CLIENT": str(PENDING_PER_CLIENT),
}


@pytest.fixture
def door(monkeypatch, tmp_path):
    """A web process (no worker) on the test database with the door's settings above."""
    for name, value in DOOR.items():
        monkeypatch.setenv(name, value)
    server = Stack(
        database_url=_test_database_url(), redis_url=settings.REDIS_URL, workdir=tmp_path
    )
    try:
        server.start_web()
        yield server
    finally:
        server.stop()


def _open(port: int, source: str, path: str, headers: dict[str, str], body: bytes) -> socket.socket:
    """A POST from `source` that announces a 1,000-byte body and sends only `body` of it."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0))
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", "Content-Length: 1000"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
    return sock


def _answers(socks: list[socket.socket], within: float) -> dict[socket.socket, bytes]:
    """What each socket is answered within `within` seconds (up to the server's close, or
    a whole response): b"" for one still unanswered."""
    got = {sock: b"" for sock in socks}
    with selectors.DefaultSelector() as waiting:
        for sock in socks:
            waiting.register(sock, selectors.EVENT_READ)
        deadline = time.monotonic() + within
        while waiting.get_map() and (left := deadline - time.monotonic()) > 0:
            for key, _ in waiting.select(left):
                chunk = key.fileobj.recv(65536)
                got[key.fileobj] += chunk
                if not chunk or _whole(got[key.fileobj]):
                    waiting.unregister(key.fileobj)
    return got


def _whole(raw: bytes) -> bool:
    head, sep, body = raw.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if sep and name.strip().lower() == b"content-length":
            return len(body) >= int(value)
    return False


def _status_and_type(raw: bytes) -> tuple[int, str | None]:
    head, _, body = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ")[1])
    try:
        return status, json.loads(body)["error"]["type"]
    except (ValueError, KeyError, TypeError):
        return status, None


def test_slow_anonymous_connections_on_runner_paths_never_starve_a_runners_heartbeat(org, door):
    job = make_job(org)
    attempt = dispatch.allocate(job.pk)
    services.job_transition(job_id=job.pk, to=JobState.PROVISIONING)
    heartbeat = f"/api/v1/runner/jobs/{job.public_id}/heartbeat"
    forged = {"Authorization": f"Bearer {token_for('no-such-attempt')}"}  # signed, no attempt
    opened: list[socket.socket] = []
    try:
        # The review's attack: the headers of a heartbeat, no token, no body.
        anonymous = [_open(door.port, "127.0.0.2", heartbeat, {}, b"") for _ in range(8)]
        # A signed token, a body that never ends.
        signed = [_open(door.port, "127.0.0.3", heartbeat, forged, b"{") for _ in range(3)]
        # Relay bundles (no token of their own) whose bodies never end, past the cap.
        relays = [_open(door.port, "127.0.0.4", "/api/v1/runner/relay", {}, b"{") for _ in range(4)]
        opened += anonymous + signed + relays
        refused_at_once = _answers(anonymous, within=1.5)
        extra = _open(door.port, "127.0.0.4", "/api/v1/runner/relay", {}, b"{")
        opened.append(extra)

        began = time.monotonic()
        answer = requests.post(
            f"{door.url}{heartbeat}",
            data=b"{}",
            headers={"Authorization": f"Bearer {token_for(attempt.token_nonce)}"},
            timeout=QUEUE_TIMEOUT_S + 5,
        )
        took = time.monotonic() - began

        assert answer.status_code == 200, (answer.status_code, answer.text)
        assert "order" in answer.json()
        assert took < 1.5, took  # not the queue's 4 s wait
        assert [_status_and_type(raw) for raw in refused_at_once.values()] == [
            (401, "unauthenticated")
        ] * 8
        assert _status_and_type(_answers([extra], within=2)[extra]) == (429, "too_many_requests")
        cut_off = _answers(signed + relays, within=BODY_TIMEOUT_S + 3)
        assert [_status_and_type(raw) for raw in cut_off.values()] == [(408, "request_timeout")] * 7
        assert time.monotonic() - began < BODY_TIMEOUT_S + 3
    finally:
        for sock in opened:
            sock.close()
