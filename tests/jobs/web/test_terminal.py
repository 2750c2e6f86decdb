"""The job page's terminal socket (apps.jobs.web.terminal) through the real ASGI application,
with the test answering as the job's runner on the session's real Redis lists
(apps.jobs.shell.pipes): it takes the session's request, says it opened, writes output and
reads what the browser typed."""

from __future__ import annotations

import json

import pytest
import redis
from channels.db import database_sync_to_async

from apps.jobs import services
from apps.jobs.events import JobEventType
from apps.jobs.models import JobEvent
from apps.jobs.shell import pipes
from apps.jobs.shell.bridge import ShellChannel
from apps.jobs.states import JobState
from apps.jobs.web import terminal
from runner import protocol
from tests.jobs.helpers import make_job, running
from tests.sockets import SOCKET_TEST, socket_counts_reset, websocket

pytestmark = [*SOCKET_TEST, pytest.mark.usefixtures("_sockets_reset")]

_sockets_reset = socket_counts_reset()


@pytest.fixture
def anyio_backend():
    return "asyncio"


def _running_job(org):
    job = make_job(org)
    attempt = running(job)
    return job, attempt


async def _job_and_attempt(org):
    job, attempt = await database_sync_to_async(_running_job)(org)
    # Attempt ids restart with each test database; a request an earlier run left is not ours.
    await pipes.client().delete(pipes.accept_key(attempt.pk))
    return job, attempt


def _path(job, cols: int = 100, rows: int = 30) -> str:
    return f"/ws/jobs/{job.public_id}/terminal/?cols={cols}&rows={rows}"


async def _json(socket, timeout: float = 5) -> dict:
    return json.loads(await socket.receive_from(timeout=timeout))


async def _up(sid: str, *frames: tuple[bytes, bytes]) -> None:
    await pipes.push(sid, "up", [protocol.encode_frame(kind, body) for kind, body in frames])


async def _down(sid: str, count: int, wait_s: float = 5) -> list[tuple[bytes, bytes]]:
    """The next `count` frames the browser's side sent the workload."""
    found: list[tuple[bytes, bytes]] = []
    while len(found) < count:
        data = await pipes.take(sid, "down", wait_s)
        assert data, f"only {found} came down"
        found += protocol.decode_frames(data)
    return found


async def _opened(socket, attempt, output: bytes = b"$ ") -> dict:
    """Connects `socket` and plays the runner opening its session; the request taken."""
    assert (await socket.connect())[0]
    assert await _json(socket) == {"type": "status", "state": "connecting"}
    requests = await pipes.take_requests(attempt.pk, 5)
    assert len(requests) == 1
    request = requests[0]
    await _up(
        request["sid"],
        (protocol.FRAME_OPENED, b'{"ok": true}'),
        (protocol.FRAME_STDOUT, output),
    )
    assert await _json(socket) == {"type": "status", "state": "connected"}
    assert await socket.receive_from(timeout=5) == output
    return request


def _events(job) -> list[JobEvent]:
    return list(
        JobEvent.objects.filter(
            job=job,
            type__in=(JobEventType.SSH_SESSION_OPENED, JobEventType.SSH_SESSION_CLOSED),
        ).order_by("id")
    )


async def _closed_event(job) -> JobEvent:
    for _ in range(100):
        events = await database_sync_to_async(_events)(job)
        if len(events) == 2:
            return events[1]
        await pipes.take("no-such-session", "up", 0.05)  # a short wait on Redis, not a sleep
    raise AssertionError(f"no closed event: {events}")


async def test_a_member_types_resizes_and_sees_the_output_until_the_shell_exits(member, org):
    job, attempt = await _job_and_attempt(org)
    socket = await websocket(_path(job), member)
    request = await _opened(socket, attempt)
    assert request["kind"] == "session" and request["command"] is None
    assert request["pty"] == {"term": "xterm-256color", "cols": 100, "rows": 30}
    sid = request["sid"]

    await socket.send_to(bytes_data=b"echo hi\r")
    await socket.send_to(text_data=json.dumps({"type": "input", "data": "é"}))
    await socket.send_to(text_data=json.dumps({"type": "resize", "cols": 120, "rows": 40}))
    assert await _down(sid, 3) == [
        (protocol.FRAME_STDIN, b"echo hi\r"),
        (protocol.FRAME_STDIN, "é".encode()),
        (protocol.FRAME_WINDOW, b'{"cols": 120, "rows": 40}'),
    ]
    await _up(sid, (protocol.FRAME_STDOUT, b"hi\r\n$ "))
    assert await socket.receive_from(timeout=5) == b"hi\r\n$ "

    await _up(sid, (protocol.FRAME_EXIT, b'{"status": 0}'), (protocol.FRAME_CLOSED, b""))
    assert await _json(socket) == {"type": "closed", "reason": "the shell exited with status 0"}
    assert await socket.receive_output(timeout=5) == {"type": "websocket.close", "code": 1000}
    assert (await _down(sid, 1))[0][0] == protocol.FRAME_CLOSE

    closed = await _closed_event(job)
    opened = (await database_sync_to_async(_events)(job))[0]
    assert opened.data == {
        "session": sid,
        "who": member.email,
        "fingerprint": "",
        "kind": "a terminal",
        "via": "terminal",
    }
    assert opened.message == f"{member.email} opened a terminal (terminal)."
    assert closed.data["reason"] == "the shell exited with status 0"
    assert closed.data["bytes_in"] == len(b"echo hi\r") + len("é".encode())
    assert closed.data["bytes_out"] == len(b"$ hi\r\n$ ")
    assert closed.data["who"] == member.email and closed.data["duration_s"] >= 0


async def test_keystrokes_and_a_resize_before_the_shell_opened_reach_it(member, org):
    job, attempt = await _job_and_attempt(org)
    socket = await websocket(_path(job, 80, 24), member)
    assert (await socket.connect())[0]
    assert await _json(socket) == {"type": "status", "state": "connecting"}
    await socket.send_to(bytes_data=b"ls\r")
    await socket.send_to(text_data=json.dumps({"type": "resize", "cols": 90, "rows": 20}))
    await socket.send_to(text_data="not json")  # ignored
    sid = (await pipes.take_requests(attempt.pk, 5))[0]["sid"]
    await _up(sid, (protocol.FRAME_OPENED, b'{"ok": true}'))
    assert await _json(socket) == {"type": "status", "state": "connected"}
    assert await _down(sid, 2) == [
        (protocol.FRAME_WINDOW, b'{"cols": 90, "rows": 20}'),
        (protocol.FRAME_STDIN, b"ls\r"),
    ]
    await socket.disconnect()


async def test_a_browser_that_goes_away_closes_the_session(member, org):
    job, attempt = await _job_and_attempt(org)
    socket = await websocket(_path(job), member)
    sid = (await _opened(socket, attempt))["sid"]
    await socket.disconnect()
    assert await _down(sid, 1) == [
        (protocol.FRAME_CLOSE, json.dumps({"message": "the browser disconnected"}).encode())
    ]
    closed = await _closed_event(job)
    assert closed.data["reason"] == "the browser disconnected"
    assert closed.data["bytes_out"] == 2


async def test_the_session_ends_saying_so_when_the_job_is_terminated(member, org, monkeypatch):
    monkeypatch.setattr(terminal, "WATCH_INTERVAL_S", 0.1)
    job, attempt = await _job_and_attempt(org)
    socket = await websocket(_path(job), member)
    sid = (await _opened(socket, attempt))["sid"]
    await database_sync_to_async(services.job_transition)(job_id=job.pk, to=JobState.TERMINATING)
    reason = f"job {job.public_id} was terminated"
    assert await _json(socket) == {"type": "closed", "reason": reason}
    assert await socket.receive_output(timeout=5) == {"type": "websocket.close", "code": 1000}
    assert (await _down(sid, 1))[0][0] == protocol.FRAME_CLOSE
    assert (await _closed_event(job)).data["reason"] == reason


async def test_an_idle_session_is_closed(member, org, monkeypatch, settings):
    monkeypatch.setattr(terminal, "WATCH_INTERVAL_S", 0.1)
    settings.SSH_SESSION_IDLE_TIMEOUT_S = 0.3
    job, attempt = await _job_and_attempt(org)
    socket = await websocket(_path(job), member)
    await _opened(socket, attempt)
    assert await _json(socket) == {"type": "closed", "reason": "it was idle for 0.3 s"}
    await socket.receive_output(timeout=5)


async def test_a_session_over_its_bytes_is_closed(member, org, monkeypatch, settings):
    monkeypatch.setattr(terminal, "WATCH_INTERVAL_S", 0.1)
    settings.SSH_SESSION_MAX_BYTES = 4
    job, attempt = await _job_and_attempt(org)
    socket = await websocket(_path(job), member)
    await _opened(socket, attempt, output=b"12345")
    assert await _json(socket) == {"type": "closed", "reason": "it carried more than 4 bytes"}
    await socket.receive_output(timeout=5)


async def test_the_runners_refusal_is_shown_and_the_socket_closed(member, org):
    job, attempt = await _job_and_attempt(org)
    socket = await websocket(_path(job), member)
    assert (await socket.connect())[0]
    assert await _json(socket) == {"type": "status", "state": "connecting"}
    sid = (await pipes.take_requests(attempt.pk, 5))[0]["sid"]
    await _up(sid, (protocol.FRAME_OPENED, b'{"error": "no shell in this image"}'))
    assert await _json(socket) == {"type": "closed", "reason": "no shell in this image"}
    assert await socket.receive_output(timeout=5) == {"type": "websocket.close", "code": 1000}
    assert await database_sync_to_async(_events)(job) == []


async def test_an_ended_job_gets_the_reason_and_a_close(member, org):
    job = await database_sync_to_async(make_job)(org, state=JobState.TERMINATED)
    socket = await websocket(_path(job), member)
    assert (await socket.connect())[0]
    assert await _json(socket) == {"type": "status", "state": "connecting"}
    closed = await _json(socket)
    assert closed["type"] == "closed"
    assert closed["reason"].startswith(f"job {job.public_id} is terminated")
    assert closed["reason"].endswith("not running")
    assert await socket.receive_output(timeout=5) == {"type": "websocket.close", "code": 1000}


async def test_a_viewer_is_refused_4403_and_nothing_is_opened(viewer, org):
    job, attempt = await _job_and_attempt(org)
    socket = await websocket(_path(job), viewer)
    assert (await socket.connect())[0]
    assert await socket.receive_output(timeout=2) == {"type": "websocket.close", "code": 4403}
    assert await pipes.take_requests(attempt.pk, 0) == []


async def test_another_orgs_job_is_the_same_as_none_4404(outsider, member, org):
    job, attempt = await _job_and_attempt(org)
    for path, user in (
        (_path(job), outsider),
        ("/ws/jobs/job_doesnotexist/terminal/", member),
    ):
        socket = await websocket(path, user)
        assert (await socket.connect())[0]
        assert await socket.receive_output(timeout=2) == {"type": "websocket.close", "code": 4404}
    assert await pipes.take_requests(attempt.pk, 0) == []


async def test_anonymous_and_foreign_origins_are_refused(member, org):
    job, _ = await _job_and_attempt(org)
    anonymous = await websocket(_path(job))
    await anonymous.connect()
    assert await anonymous.receive_output(timeout=2) == {"type": "websocket.close", "code": 4401}
    foreign = await websocket(_path(job), member, origin="http://evil.example")
    assert not (await foreign.connect())[0]


async def test_a_failing_channel_ends_the_session_instead_of_hanging_it(member, org, monkeypatch):
    job, attempt = await _job_and_attempt(org)
    socket = await websocket(_path(job), member)
    sid = (await _opened(socket, attempt))["sid"]

    async def broken(self, wait_s):
        raise redis.exceptions.TimeoutError("Timeout reading from 127.0.0.1:6379")

    monkeypatch.setattr(ShellChannel, "receive", broken)
    await _up(sid, (protocol.FRAME_STDOUT, b"x"))  # the pump reads once more, then fails
    assert await socket.receive_from(timeout=5) == b"x"
    reason = "the control plane lost the session's channel"
    assert await _json(socket) == {"type": "closed", "reason": reason}
    assert (await _closed_event(job)).data["reason"] == reason


async def test_a_quiet_session_outlasts_the_redis_clients_default_read_timeout(member, org):
    """redis-py 8 reads with a 5 s socket timeout unless told otherwise; the session's
    blocking pops wait longer than that."""
    job, attempt = await _job_and_attempt(org)
    socket = await websocket(_path(job), member)
    sid = (await _opened(socket, attempt))["sid"]
    assert await socket.receive_nothing(timeout=6, interval=0.5)
    await _up(sid, (protocol.FRAME_STDOUT, b"still here"))
    assert await socket.receive_from(timeout=5) == b"still here"
    await socket.disconnect()
