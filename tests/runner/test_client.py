"""The HTTP client against a real server on 127.0.0.1: headers, JSON, classification, retry."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from runner.client import (
    ControlClient,
    FatalError,
    Outcome,
    RetryableError,
    RetryStopped,
    SupersededError,
    call_with_retry,
    classify,
)
from tests.runner.peer import HttpServer

JOB = "job_abc"
TOKEN = "tok-123"
SUPERSEDED = {"error": {"type": "attempt_superseded", "message": "A newer attempt runs."}}


@pytest.fixture
def server():
    seen: list[tuple[str, str, dict, object]] = []
    answers: dict[str, tuple[int, object]] = {}

    def handle(method, path, headers, body):
        seen.append((method, path, headers, body))
        endpoint = path.rsplit("/", 1)[-1]
        if endpoint == "slow":
            time.sleep(1.0)
        return answers.get(endpoint, (200, {"order": "continue"}))

    srv = HttpServer(handle).start()
    srv.seen = seen
    srv.answers = answers
    yield srv
    srv.stop()


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_it_sends_the_bearer_token_and_json(server):
    client = ControlClient(server.url + "/", JOB, TOKEN)

    answer = client.post_heartbeat(41)

    assert answer == {"order": "continue"}
    method, path, headers, body = server.seen[0]
    assert (method, path) == ("POST", f"/api/v1/runner/jobs/{JOB}/heartbeat")
    assert headers["Authorization"] == f"Bearer {TOKEN}"
    assert headers["Content-Type"] == "application/json"
    assert body == {"last_seq": 41}


def test_get_spec_sends_no_body(server):
    server.answers["spec"] = (200, {"job_id": JOB})

    assert ControlClient(server.url, JOB, TOKEN).get_spec() == {"job_id": JOB}
    assert server.seen[0][:2] == ("GET", f"/api/v1/runner/jobs/{JOB}/spec")
    assert server.seen[0][3] is None


@pytest.mark.parametrize(
    ("status", "body", "error"),
    [
        (401, {"error": {"type": "authentication_failed"}}, FatalError),
        (404, {"error": {"type": "not_found"}}, FatalError),
        (409, SUPERSEDED, SupersededError),
        (409, {"error": {"type": "conflict"}}, RetryableError),
        (400, {"error": {"type": "invalid_request"}}, RetryableError),
        (413, None, RetryableError),
        (503, None, RetryableError),
        (500, {"error": {"type": "server_error"}}, RetryableError),
        (429, None, RetryableError),
    ],
)
def test_it_classifies_answers(server, status, body, error):
    server.answers["exit"] = (status, body)

    with pytest.raises(error) as raised:
        ControlClient(server.url, JOB, TOKEN).post_exit(3, 10)

    assert raised.value.status == status


def test_a_refused_connection_is_retryable():
    client = ControlClient(f"http://127.0.0.1:{_closed_port()}", JOB, TOKEN)

    with pytest.raises(RetryableError):
        client.post_heartbeat(1)


def test_a_timeout_is_retryable(server):
    client = ControlClient(server.url, JOB, TOKEN, timeout=0.2)

    with pytest.raises(RetryableError, match="timed out"):
        client.request("POST", "slow", {})


def test_classify():
    assert classify(200, {"ok": True}) is Outcome.OK
    assert classify(200, None) is Outcome.RETRY  # a proxy's HTML page, not our answer
    assert classify(502, None) is Outcome.RETRY
    assert classify(401, None) is Outcome.FATAL
    assert classify(404, None) is Outcome.FATAL
    assert classify(409, SUPERSEDED) is Outcome.SUPERSEDED


def test_retry_backs_off_exponentially_until_the_control_plane_answers(server):
    server.answers["heartbeat"] = (503, None)
    client = ControlClient(server.url, JOB, TOKEN)
    delays: list[float] = []

    def sleep(delay: float) -> None:
        delays.append(delay)
        if len(delays) == 4:
            server.answers.pop("heartbeat")

    answer = call_with_retry(lambda: client.post_heartbeat(1), sleep=sleep)

    assert answer == {"order": "continue"}
    assert len(server.seen) == 5
    for delay, nominal in zip(delays, [0.2, 0.4, 0.8, 1.6]):  # noqa: B905 - same length
        assert nominal / 2 <= delay <= nominal


def test_retry_caps_the_delay_at_ten_seconds():
    delays: list[float] = []

    def fail():
        raise RetryableError("away")

    def sleep(delay: float) -> None:
        delays.append(delay)
        if len(delays) == 12:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        call_with_retry(fail, sleep=sleep)

    assert all(5.0 <= delay <= 10.0 for delay in delays[7:])


def test_retry_stops_at_the_deadline_against_a_closed_port():
    client = ControlClient(f"http://127.0.0.1:{_closed_port()}", JOB, TOKEN)
    started = time.monotonic()

    with pytest.raises(RetryableError):
        call_with_retry(lambda: client.post_exit(0, 1), deadline=started + 1.0)

    assert 0.9 <= time.monotonic() - started < 2.0


def test_retry_gives_up_at_once_on_fatal_and_superseded(server):
    client = ControlClient(server.url, JOB, TOKEN)
    server.answers["heartbeat"] = (401, None)
    with pytest.raises(FatalError):
        call_with_retry(lambda: client.post_heartbeat(1), sleep=pytest.fail)
    server.answers["heartbeat"] = (409, SUPERSEDED)
    with pytest.raises(SupersededError):
        call_with_retry(lambda: client.post_heartbeat(1), sleep=pytest.fail)
    assert len(server.seen) == 2


def test_retry_stops_when_told_to():
    client = ControlClient(f"http://127.0.0.1:{_closed_port()}", JOB, TOKEN)
    stop = threading.Event()
    threading.Timer(0.3, stop.set).start()

    started = time.monotonic()
    with pytest.raises(RetryStopped):
        call_with_retry(lambda: client.post_heartbeat(1), should_stop=stop.is_set, sleep=stop.wait)

    assert time.monotonic() - started < 1.0


def test_a_log_batch_from_the_threshold_on_goes_gzipped(server):
    client = ControlClient(server.url, JOB, TOKEN)
    small = [b'{"seq":1,"message":"short"}']
    big = [b'{"seq":%d,"message":"loss 0.%04d"}' % (n, n) for n in range(1, 2001)]

    client.post_log_lines(small, gzip_min_bytes=1024)
    client.post_log_lines(big, follows=7, gzip_min_bytes=1024)
    client.post_log_lines(big)  # no threshold (an older control plane): never gzipped

    (_, _, small_headers, small_body), (_, _, big_headers, big_body), (_, _, plain_headers, _) = (
        server.seen
    )
    assert "Content-Encoding" not in small_headers
    assert small_body == {"lines": [{"seq": 1, "message": "short"}]}
    assert big_headers["Content-Encoding"] == "gzip"
    assert big_headers["Content-Type"] == "application/json"
    assert big_body["follows"] == 7
    assert [line["seq"] for line in big_body["lines"]] == list(range(1, 2001))
    # What went over the wire is the compressed body, several times smaller.
    assert int(big_headers["Content-Length"]) * 4 < int(plain_headers["Content-Length"])
    assert "Content-Encoding" not in plain_headers
