"""Admission control for the runner protocol (config/admission.py): a bounded number of runner
requests run at once, the rest wait their turn in the event loop, and past the wait they are
answered 503 `overloaded`, never a pile of threads fighting for the connection pool."""

from __future__ import annotations

import asyncio
import json

import pytest
from django.db import OperationalError
from django.test import RequestFactory
from psycopg_pool import PoolTimeout

from apps.core.middleware import ApiJsonErrorsMiddleware
from apps.jobs.execution.tokens import token_for
from config.admission import RunnerAdmission

pytestmark = pytest.mark.anyio

HEARTBEAT = "/api/v1/runner/jobs/job_abc/heartbeat"


class HeldApp:
    """The app behind the gate (Django in production): each request holds until released,
    and the most requests inside at once is recorded."""

    def __init__(self) -> None:
        self.inside = 0
        self.most_inside = 0
        self.release = asyncio.Event()
        self.paths: list[str] = []

    async def __call__(self, scope: dict, receive, send) -> None:
        self.inside += 1
        self.most_inside = max(self.most_inside, self.inside)
        self.paths.append(scope["path"])
        try:
            await self.release.wait()
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})
        finally:
            self.inside -= 1


def _signed() -> list[tuple[bytes, bytes]]:
    """The header of a runner token whose signature checks out (its attempt is no matter
    to the gate)."""
    return [(b"authorization", f"Bearer {token_for('n0nce')}".encode())]


async def _request(
    app, path: str, query: bytes = b"", headers: list | None = None, client: str = "10.0.0.1"
) -> tuple[int, dict[bytes, bytes], bytes]:
    sent: list[dict] = []

    async def receive() -> dict:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": path,
        "query_string": query,
        "headers": _signed() if headers is None else headers,
        "client": (client, 40000),
    }
    await app(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], dict(start["headers"]), body


async def _until(condition, timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.005)


async def test_at_most_the_limit_of_runner_requests_run_at_once_and_the_rest_wait_their_turn():
    inner = HeldApp()
    gate = RunnerAdmission(inner, limit=2, timeout_s=10)
    paths = [f"/api/v1/runner/jobs/job_{i}/{op}" for i, op in enumerate(["logs", "heartbeat"] * 3)]

    requests = [asyncio.create_task(_request(gate, path)) for path in paths]
    await _until(lambda: inner.inside == 2)
    await asyncio.sleep(0.05)  # the other four are waiting, not inside
    assert inner.inside == 2 and len(inner.paths) == 2
    inner.release.set()
    answers = await asyncio.gather(*requests)

    assert [status for status, _, _ in answers] == [200] * 6
    assert inner.most_inside == 2
    assert sorted(inner.paths) == sorted(paths)


async def test_a_runner_request_that_waits_past_the_timeout_gets_503_overloaded_to_retry():
    inner = HeldApp()
    gate = RunnerAdmission(inner, limit=2, timeout_s=0.1)
    held = [asyncio.create_task(_request(gate, HEARTBEAT)) for _ in range(2)]
    await _until(lambda: inner.inside == 2)

    status, headers, body = await _request(gate, "/api/v1/runner/jobs/job_abc/exit")

    assert status == 503
    assert headers[b"retry-after"] == b"1"
    assert headers[b"content-type"] == b"application/json"
    error = json.loads(body)["error"]
    assert error["type"] == "overloaded"
    assert "busy" in error["message"]
    assert inner.paths == [HEARTBEAT, HEARTBEAT]  # the refused one never reached the app
    inner.release.set()
    assert [(await task)[0] for task in held] == [200, 200]
    assert (await _request(gate, HEARTBEAT))[0] == 200  # the slots came back


async def test_log_batches_never_take_the_last_slot_so_heartbeats_get_in_at_once():
    """Log batches outnumber every other call; they may fill all slots but one, so a
    heartbeat is never stuck behind them (and a batch that waits too long is refused)."""
    inner = HeldApp()
    gate = RunnerAdmission(inner, limit=3, timeout_s=0.2)
    logs = "/api/v1/runner/jobs/job_{}/logs"
    batches = [asyncio.create_task(_request(gate, logs.format(i))) for i in range(2)]
    await _until(lambda: inner.inside == 2)

    waiting = asyncio.create_task(_request(gate, logs.format(2)))
    beat = asyncio.create_task(_request(gate, HEARTBEAT))
    await _until(lambda: inner.inside == 3)  # the heartbeat, not the third batch
    assert inner.paths[-1] == HEARTBEAT
    assert (await waiting)[0] == 503  # it waited its whole 0.2 s for a batch slot
    inner.release.set()
    assert [(await task)[0] for task in [*batches, beat]] == [200, 200, 200]
    assert inner.most_inside == 3


async def test_a_relays_bundle_waits_as_a_log_batch_does():
    inner = HeldApp()
    gate = RunnerAdmission(inner, limit=2, timeout_s=0.2)
    first = asyncio.create_task(_request(gate, "/api/v1/runner/relay"))
    await _until(lambda: inner.inside == 1)

    second = asyncio.create_task(_request(gate, "/api/v1/runner/relay"))
    beat = asyncio.create_task(_request(gate, HEARTBEAT))
    await _until(lambda: inner.inside == 2)  # the heartbeat took the slot left over
    assert inner.paths == ["/api/v1/runner/relay", HEARTBEAT]
    assert (await second)[0] == 503  # a bundle, like a batch, never takes the last slot
    inner.release.set()
    assert [(await task)[0] for task in (first, beat)] == [200, 200]


async def test_a_relays_heartbeat_lane_bundle_goes_in_as_a_heartbeat():
    """The relay's heartbeats-only bundle (`relay?calls=heartbeat`) takes the slot the
    batches leave over, like a heartbeat: it never waits behind a bundle of batches."""
    inner = HeldApp()
    gate = RunnerAdmission(inner, limit=2, timeout_s=0.2)
    batches = asyncio.create_task(_request(gate, "/api/v1/runner/relay"))
    await _until(lambda: inner.inside == 1)

    other_query = asyncio.create_task(_request(gate, "/api/v1/runner/relay", b"calls=logs"))
    await asyncio.sleep(0.05)
    assert inner.inside == 1  # any other bundle waits as a batch does
    beats = asyncio.create_task(_request(gate, "/api/v1/runner/relay", b"calls=heartbeat"))
    await _until(lambda: inner.inside == 2)
    assert (await other_query)[0] == 503
    inner.release.set()
    assert [(await task)[0] for task in (batches, beats)] == [200, 200]


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/compute/jobs",
        "/o/acme/jobs/",
        "/api/v1/runner/jobs/job_abc/artifacts",
        "/api/v1/runner/jobs/job_abc/workdirs/wd_1/download",
    ],
)
async def test_pages_the_api_and_uploads_are_never_held_by_runner_traffic(path):
    inner = HeldApp()
    gate = RunnerAdmission(inner, limit=2, timeout_s=0.05)
    runners = [asyncio.create_task(_request(gate, HEARTBEAT)) for _ in range(2)]
    await _until(lambda: inner.inside == 2)

    other = asyncio.create_task(_request(gate, path))
    await _until(lambda: inner.inside == 3)  # admitted at once, though the runner slots are full
    await asyncio.sleep(0.1)  # longer than the runner wait: still not refused
    assert not other.done()
    inner.release.set()
    assert (await other)[0] == 200
    assert [(await task)[0] for task in runners] == [200, 200]


async def test_the_served_application_gates_runner_requests(monkeypatch):
    """The ASGI application uvicorn serves has the gate behind its body guard: with the
    gate's slots taken, a runner request is answered 503 without reaching Django."""
    from config import asgi

    monkeypatch.setattr(asgi.runner_admission, "_slots", asyncio.Semaphore(1))
    monkeypatch.setattr(asgi.runner_admission, "timeout_s", 0.05)
    await asgi.runner_admission.slots.acquire()

    status, _, body = await _request(asgi.application, HEARTBEAT)

    assert status == 503
    assert json.loads(body)["error"]["type"] == "overloaded"


def test_an_exhausted_connection_pool_is_a_503_overloaded_under_the_api_not_a_500():
    middleware = ApiJsonErrorsMiddleware(lambda request: None)
    try:
        try:
            raise PoolTimeout("couldn't get a connection after 30.00 sec")
        except PoolTimeout as cause:
            raise OperationalError(str(cause)) from cause
    except OperationalError as exc:
        exhausted = exc

    answer = middleware.process_exception(RequestFactory().post("/api/v1/compute/jobs"), exhausted)

    assert answer.status_code == 503
    assert answer["Retry-After"] == "1"
    assert json.loads(answer.content)["error"]["type"] == "overloaded"
    page = RequestFactory().get("/o/acme/jobs/")
    assert middleware.process_exception(page, exhausted) is None  # a page: Django's 500 page
    other = OperationalError("server closed the connection unexpectedly")
    assert middleware.process_exception(RequestFactory().get("/api/v1/x"), other) is None


class SlowBody:
    """A client that sends its headers and then nothing (until `done` is set)."""

    def __init__(self) -> None:
        self.done = asyncio.Event()

    async def receive(self) -> dict:
        await self.done.wait()
        return {"type": "http.disconnect"}


async def _slow(gate, path: str, client: str, headers: list | None = None) -> list[dict]:
    sent: list[dict] = []
    scope = {
        "type": "http",
        "method": "POST",
        "path": path,
        "query_string": b"",
        "headers": _signed() if headers is None else headers,
        "client": (client, 40000),
    }

    async def send(message: dict) -> None:
        sent.append(message)

    await gate(scope, SlowBody().receive, send)
    return sent


async def test_a_call_without_a_signed_token_reaches_the_view_at_once_without_a_slot_or_body():
    inner = HeldApp()
    gate = RunnerAdmission(inner, limit=2, timeout_s=0.05)
    held = [asyncio.create_task(_request(gate, HEARTBEAT)) for _ in range(2)]
    await _until(lambda: inner.inside == 2)

    forged = [(b"authorization", b"Bearer tyr_n0nce_" + b"0" * 64)]
    anonymous = [asyncio.create_task(_slow(gate, HEARTBEAT, "10.0.0.9", h)) for h in ([], forged)]
    await _until(lambda: inner.inside == 4)  # not queued for a slot, not waiting for a body
    inner.release.set()
    assert [sent[0]["status"] for sent in await asyncio.gather(*anonymous)] == [200, 200]
    assert [(await task)[0] for task in held] == [200, 200]


async def test_a_body_that_does_not_arrive_in_time_is_a_408_and_never_takes_a_slot():
    inner = HeldApp()
    inner.release.set()
    gate = RunnerAdmission(inner, limit=2, timeout_s=5, body_timeout_s=0.1)

    sent = await _slow(gate, HEARTBEAT, "10.0.0.9")

    assert sent[0]["status"] == 408 and (b"connection", b"close") in sent[0]["headers"]
    assert json.loads(sent[1]["body"])["error"]["type"] == "request_timeout"
    assert inner.paths == [] and gate.pending == {}
    assert (await _request(gate, HEARTBEAT))[0] == 200


async def test_one_address_may_keep_only_so_many_bodies_waiting_and_others_are_not_held():
    inner = HeldApp()
    inner.release.set()
    gate = RunnerAdmission(inner, limit=2, timeout_s=5, body_timeout_s=5, max_pending_per_client=2)
    slow = [asyncio.create_task(_slow(gate, "/api/v1/runner/relay", "10.0.0.9")) for _ in range(2)]
    await _until(lambda: gate.pending["10.0.0.9"] == 2)

    sent = await _slow(gate, HEARTBEAT, "10.0.0.9")

    assert sent[0]["status"] == 429
    assert json.loads(sent[1]["body"])["error"]["type"] == "too_many_requests"
    assert (await _request(gate, HEARTBEAT, client="10.0.0.1"))[0] == 200  # another address
    for task in slow:
        task.cancel()
