"""The host relay (`runner.relay`) and the runner's client in front of it, over real sockets:
the relay in a thread, the control plane played by `tests.runner.peer.HttpServer` where the
case is one the real control plane cannot play (an older one without `relay`, one that is
down). The relay against the real control plane runs in tests/integration/test_relay_run.py."""

from __future__ import annotations

import gzip
import json
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest

from runner import relay as relay_module
from runner.client import ControlClient, RetryableError
from runner.config import WORKLOAD_HIDDEN_VARS, ConfigError, load_config
from runner.protocol import ENV_RELAY_URL, RELAY_PATH
from tests.runner.peer import HttpServer


class Upstream:
    """A control plane that answers each bundle entry 200 with its call and job, or as
    `bundle_answer` says; every request it got is in `seen`."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, dict, object]] = []  # (path, headers, body)
        self.queries: list[str] = []  # each request's query string, in the same order
        self.bundle_answer: tuple[int, object] | None = None
        self.first_bundle_delay = 0.0
        self.lock = threading.Lock()
        self.server = HttpServer(self.handle).start()

    def handle(self, method, path, headers, body):
        path, _, query = path.partition("?")
        with self.lock:
            self.seen.append((path, headers, body))
            self.queries.append(query)
            first = sum(1 for seen in self.seen if seen[0] == RELAY_PATH) == 1
        if path != RELAY_PATH:
            return 200, {"alone": path.rsplit("/", 1)[-1], "token": headers["Authorization"]}
        if first and self.first_bundle_delay:
            time.sleep(self.first_bundle_delay)
        if self.bundle_answer is not None:
            return self.bundle_answer
        return 200, {
            "results": [
                {"status": 200, "body": {"call": entry["call"], "job": entry["job_id"]}}
                for entry in body["entries"]
            ]
        }

    def bundles(self, query: str | None = None) -> list[list[dict]]:
        """The entries of each bundle, of every lane or of the one at `query`."""
        return [
            body["entries"]
            for (path, _, body), sent_at in zip(self.seen, self.queries, strict=True)
            if path == RELAY_PATH and query in (None, sent_at)
        ]


@pytest.fixture
def upstream():
    played = Upstream()
    yield played
    played.server.stop()


@pytest.fixture
def relay(upstream):
    server = relay_module.serve(("127.0.0.1", 0), upstream.server.url)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    server.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield server
    server.shutdown()
    server.relay.stop()
    server.server_close()


def _post(url: str, job: str, call: str, body: bytes, token: str = "tok", **headers):
    req = urllib.request.Request(f"{url}/api/v1/runner/jobs/{job}/{call}", data=body)
    req.add_header("Authorization", f"Bearer {token}")
    req.add_header("Content-Type", "application/json")
    for name, value in headers.items():
        req.add_header(name, value)
    try:
        with urllib.request.urlopen(req, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_each_runner_gets_its_own_entrys_answer(relay, upstream):
    answers = [
        _post(relay.url, "job_a", "logs", b'{"lines": []}', token="tok-a"),
        _post(relay.url, "job_b", "heartbeat", b'{"last_seq": 3}', token="tok-b"),
    ]

    assert answers == [
        (200, {"call": "logs", "job": "job_a"}),
        (200, {"call": "heartbeat", "job": "job_b"}),
    ]
    entries = [entry for bundle in upstream.bundles() for entry in bundle]
    assert entries == [
        {"job_id": "job_a", "token": "tok-a", "call": "logs", "body": {"lines": []}},
        {"job_id": "job_b", "token": "tok-b", "call": "heartbeat", "body": {"last_seq": 3}},
    ]


def test_calls_that_wait_while_a_bundle_is_out_go_together_in_the_next(relay, upstream):
    upstream.first_bundle_delay = 0.5
    answers: list = []
    first = threading.Thread(
        target=lambda: answers.append(_post(relay.url, "job_0", "heartbeat", b"{}"))
    )
    first.start()
    time.sleep(0.2)  # the first bundle is out
    others = [
        threading.Thread(
            target=lambda n=n: answers.append(_post(relay.url, f"job_{n}", "heartbeat", b"{}"))
        )
        for n in range(1, 11)
    ]
    for thread in others:
        thread.start()
    for thread in [first, *others]:
        thread.join(10)

    assert sorted(answer[1]["job"] for answer in answers) == sorted(f"job_{n}" for n in range(11))
    assert [len(bundle) for bundle in upstream.bundles()] == [1, 10]


def test_a_heartbeat_goes_at_once_while_a_bundle_of_batches_is_out(relay, upstream):
    """Heartbeats have a lane of their own: one posted while a slow bundle of log batches is
    out is answered before that bundle, from a bundle of heartbeats only that goes to
    `relay?calls=heartbeat` (admission control lets it in as a heartbeat); the batches keep
    their order in theirs."""
    upstream.first_bundle_delay = 1.5
    answered: list[str] = []

    def post(job: str, call: str, body: bytes) -> None:
        _post(relay.url, job, call, body)
        answered.append(f"{job} {call}")

    slow = threading.Thread(target=post, args=("job_0", "logs", b'{"lines": []}'))
    slow.start()
    time.sleep(0.2)  # the first bundle of batches is out
    later = threading.Thread(target=post, args=("job_1", "logs", b'{"lines": []}'))
    later.start()
    post("job_2", "heartbeat", b'{"last_seq": 4}')
    beat_answered_while_batches_out = slow.is_alive()
    slow.join(10)
    later.join(10)

    assert beat_answered_while_batches_out
    # The batches' order is what reached upstream (below); their two answers come back a
    # moment apart, and which client thread notes its own first is the scheduler's choice.
    assert answered[0] == "job_2 heartbeat"
    assert sorted(answered[1:]) == ["job_0 logs", "job_1 logs"]
    assert [[entry["job_id"] for entry in bundle] for bundle in upstream.bundles("")] == [
        ["job_0"],
        ["job_1"],
    ]
    assert upstream.bundles("calls=heartbeat") == [
        [{"job_id": "job_2", "token": "tok", "call": "heartbeat", "body": {"last_seq": 4}}]
    ]


def test_a_busy_hosts_batches_gather_for_the_batch_interval_and_an_idle_ones_go_at_once(upstream):
    """A bundle of batches leaves at most every batch interval: the first batch goes at
    once, those posted within the interval after it go together in the next bundle, and a
    heartbeat meanwhile goes at once in its own lane."""
    server = relay_module.serve(("127.0.0.1", 0), upstream.server.url, batch_interval_s=2.0)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        began = time.monotonic()
        first = _post(url, "job_0", "logs", b'{"lines": []}')
        first_took = time.monotonic() - began
        later = [
            threading.Thread(target=_post, args=(url, f"job_{n}", "logs", b'{"lines": []}'))
            for n in range(1, 4)
        ]
        for thread in later:
            thread.start()
        beat_began = time.monotonic()
        _post(url, "job_9", "heartbeat", b"{}")
        beat_took = time.monotonic() - beat_began
        for thread in later:
            thread.join(10)
    finally:
        server.shutdown()
        server.relay.stop()
        server.server_close()

    assert first == (200, {"call": "logs", "job": "job_0"})
    # Going at once (~0 s) vs waiting for the 2 s interval: the bound sits between.
    assert first_took < 1.0 and beat_took < 1.0
    batches = [sorted(entry["job_id"] for entry in bundle) for bundle in upstream.bundles("")]
    assert batches == [["job_0"], ["job_1", "job_2", "job_3"]]
    assert len(upstream.bundles("calls=heartbeat")) == 1


def test_a_control_plane_without_relay_gets_each_call_on_its_own(relay, upstream):
    upstream.bundle_answer = (404, {"error": {"type": "not_found"}})

    answer = _post(relay.url, "job_a", "logs", b'{"lines": []}', token="tok-a")

    assert answer == (200, {"alone": "logs", "token": "Bearer tok-a"})


def test_a_control_plane_that_is_down_is_a_502_the_runner_retries(upstream):
    server = relay_module.serve(("127.0.0.1", 0), f"http://127.0.0.1:{_closed_port()}")
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        status, body = _post(url, "job_a", "heartbeat", b"{}")
        client = ControlClient(f"http://127.0.0.1:{_closed_port()}", "job_a", "t", relay_url=url)
        with pytest.raises(RetryableError) as raised:
            client.post_heartbeat(1)
    finally:
        server.shutdown()
        server.relay.stop()
        server.server_close()

    assert (status, body["error"]["type"]) == (502, "relay_upstream")
    assert raised.value.status == 502  # the relay answered: the runner retries it


def test_what_cannot_travel_in_a_bundle_goes_through_on_its_own(relay, upstream):
    packed = gzip.compress(b'{"lines": []}')
    answers = [
        _post(relay.url, "job_a", "logs", packed, **{"Content-Encoding": "gzip"}),
        _post(relay.url, "job_a", "logs", b"[1, 2]"),
        _post(relay.url, "job_a", "logs", b"{}", **{"X-Trainyard-Protocol": "2"}),
    ]

    assert [answer for answer in answers] == [(200, {"alone": "logs", "token": "Bearer tok"})] * 3
    assert upstream.bundles() == []
    gzipped = upstream.seen[0]
    assert gzipped[1]["Content-Encoding"] == "gzip" and gzipped[2] == {"lines": []}


def test_the_relay_carries_only_logs_and_heartbeats(relay, upstream):
    status, body = _post(relay.url, "job_a", "exit", b'{"exit_code": 0}')

    assert (status, body["error"]["type"]) == (404, "not_found")
    assert upstream.seen == []


def test_the_client_goes_by_the_relay_and_past_it_when_it_is_not_there(relay, upstream):
    by_relay = ControlClient(upstream.server.url, "job_a", "tok", relay_url=relay.url)
    no_relay = ControlClient(
        upstream.server.url, "job_a", "tok", relay_url=f"http://127.0.0.1:{_closed_port()}"
    )

    assert by_relay.post_heartbeat(1) == {"call": "heartbeat", "job": "job_a"}
    assert by_relay.post_log_lines([b'{"seq": 1}']) == {"call": "logs", "job": "job_a"}
    assert no_relay.post_heartbeat(2) == {"alone": "heartbeat", "token": "Bearer tok"}
    assert by_relay.get_spec() == {"alone": "spec", "token": "Bearer tok"}  # never relayed
    assert relay.relay.counts == {"bundles": 2, "relayed": 2, "passed_through": 0}


def test_the_relay_url_is_read_checked_and_hidden_from_the_workload(tmp_path):
    base = {
        "TRAINYARD_CONTROL_URL": "http://cp",
        "TRAINYARD_JOB_ID": "job_a",
        "TRAINYARD_RUNNER_TOKEN": "tok",
        "TRAINYARD_WORKDIR": str(tmp_path),
    }

    assert load_config(base).relay_url is None
    assert load_config({**base, ENV_RELAY_URL: "http://127.0.0.1:8790/"}).relay_url == (
        "http://127.0.0.1:8790"
    )
    with pytest.raises(ConfigError, match=ENV_RELAY_URL):
        load_config({**base, ENV_RELAY_URL: "ftp://nope"})
    assert ENV_RELAY_URL in WORKLOAD_HIDDEN_VARS


def test_a_burst_of_runners_connecting_while_the_relay_is_busy_is_queued_not_dropped():
    """Runners open a connection per call; while the relay's accepting thread waits for a
    core, the kernel must hold their connections, not drop them (a dropped one connects
    again only after a second or more)."""
    server = relay_module.serve(("127.0.0.1", 0), f"http://127.0.0.1:{_closed_port()}")
    sockets = []
    try:  # serve_forever not started: nothing is accepted meanwhile
        connected = 0
        for _ in range(100):
            runner = socket.socket()
            runner.settimeout(0.5)
            sockets.append(runner)
            try:
                runner.connect(server.server_address)
                connected += 1
            except OSError:
                pass
        assert connected == 100
    finally:
        for runner in sockets:
            runner.close()
        server.server_close()
        server.relay.stop()
