"""The control socket (`runner.control_socket`): a runner in a network of its own reaches
its control plane only through a Unix socket the host serves. The server runs as a real
process; the control plane is `tests.runner.peer`'s, over real sockets."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runner.client import ControlClient, RetryableError
from runner.config import WORKLOAD_HIDDEN_VARS, load_config
from runner.control_socket import SOCKET_ORIGIN, UnixHTTPConnection
from runner.protocol import ENV_CONTROL_SOCKET
from tests.live import ROOT, free_port, wait_until
from tests.runner.peer import ControlPlane, HttpServer

JOB = "job_sock1"
TOKEN = "ty-socket-token"


class SocketServer:
    """`python -m runner.control_socket` in `where`, its socket named relatively (as the
    local backend starts it: a work directory's path may be longer than a socket path)."""

    def __init__(self, where: Path, upstream: str, *extra: str) -> None:
        self.path = where / "control.sock"
        argv = [sys.executable, "-m", "runner.control_socket", "--socket", "control.sock"]
        self.process = subprocess.Popen(
            [*argv, "--job", JOB, "--upstream", upstream, *extra],
            cwd=where,
            env={"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        wait_until(self.path.exists, timeout=10, what="the control socket")

    def stop(self) -> None:
        self.process.kill()
        self.process.wait(timeout=10)


@pytest.fixture
def plane():
    plane = ControlPlane(job_id=JOB, token=TOKEN, spec={"job_id": JOB, "command": ["true"]})
    plane.server.start()
    yield plane
    plane.server.stop()


@pytest.fixture
def server(tmp_path, plane):
    server = SocketServer(tmp_path, plane.url)
    yield server
    server.stop()


def _client(server: SocketServer) -> ControlClient:
    return ControlClient(SOCKET_ORIGIN, JOB, TOKEN, control_socket=str(server.path))


def _raw(server: SocketServer, method: str, path: str, body: bytes = b"") -> tuple[int, dict]:
    connection = UnixHTTPConnection(str(server.path), "trainyard.control", timeout=10)
    connection.request(method, path, body=body or None, headers={"Authorization": "Bearer x"})
    answer = connection.getresponse()
    status, data = answer.status, answer.read()
    connection.close()
    return status, json.loads(data)


def test_a_runner_talks_to_its_control_plane_only_through_the_socket(server, plane, tmp_path):
    client = _client(server)

    assert client.get_spec()["job_id"] == JOB
    assert client.post_heartbeat(0) == {"order": "continue"}
    weights = tmp_path / "checkpoint.tar.gz"
    weights.write_bytes(os.urandom(3 * 1024 * 1024))  # streamed, in many chunks
    digest = hashlib.sha256(weights.read_bytes()).hexdigest()
    assert client.upload_artifact("checkpoint", 5, str(weights), digest)["id"] == "art_1"
    plane.downloads[f"/api/v1/runner/jobs/{JOB}/artifacts/1/download"] = weights.read_bytes()
    with open(tmp_path / "back", "wb") as out:
        assert client.download(f"/api/v1/runner/jobs/{JOB}/artifacts/1/download", out) > 0

    assert plane.uploads[0]["body"] == weights.read_bytes()
    assert (tmp_path / "back").read_bytes() == weights.read_bytes()
    # The token went as the runner's own header; the peer saw every call of the runner.
    assert [endpoint for _, endpoint, _ in plane.requests] == [
        "spec",
        "heartbeat",
        "artifacts?kind=checkpoint&step=5",
        "artifacts/1/download",
    ]
    assert all(headers["authorization"] == f"Bearer {TOKEN}" for *_, headers in plane.requests)


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/compute/jobs",
        "/admin/",
        "/api/v1/runner/jobs/job_other/spec",
        "/api/v1/runner/relay",
        f"/api/v1/runner/jobs/{JOB}/../job_other/spec",
    ],
)
def test_anything_but_this_jobs_runner_calls_is_refused_and_never_forwarded(server, plane, path):
    status, body = _raw(server, "POST", path, b'{"a": 1}')

    assert (status, body["error"]["type"]) == (403, "forbidden_path")
    assert plane.requests == []


def test_log_batches_and_heartbeats_go_to_the_relay_when_there_is_one(tmp_path, plane):
    relayed: list[str] = []

    def relay(method, path, headers, body):
        relayed.append(path)
        return 200, {"order": "continue"}

    relay_server = HttpServer(relay).start()
    server = SocketServer(tmp_path, plane.url, "--relay", relay_server.url)
    try:
        client = _client(server)
        client.post_heartbeat(3)
        client.get_spec()
    finally:
        server.stop()
        relay_server.stop()

    assert relayed == [f"/api/v1/runner/jobs/{JOB}/heartbeat"]
    assert [endpoint for _, endpoint, _ in plane.requests] == ["spec"]


def test_a_control_plane_that_does_not_answer_is_a_retryable_502(tmp_path):
    server = SocketServer(tmp_path, f"http://127.0.0.1:{free_port()}")
    try:
        with pytest.raises(RetryableError) as caught:
            _client(server).get_spec()
    finally:
        server.stop()
    assert caught.value.status == 502


def test_the_socket_is_the_runners_alone_and_no_proxy_captures_it(server, plane, monkeypatch):
    """An image's HTTP_PROXY must not carry the runner's calls (and its token) elsewhere;
    the socket's variable is hidden from the workload like the runner's other ones."""
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("http_proxy", f"http://127.0.0.1:{free_port()}")

    assert _client(server).get_spec()["job_id"] == JOB
    assert ENV_CONTROL_SOCKET in WORKLOAD_HIDDEN_VARS
    config = load_config(
        {
            "TRAINYARD_CONTROL_URL": SOCKET_ORIGIN,
            "TRAINYARD_JOB_ID": JOB,
            "TRAINYARD_RUNNER_TOKEN": TOKEN,
            "TRAINYARD_WORKDIR": "/work",
            ENV_CONTROL_SOCKET: str(server.path),
        }
    )
    assert config.control_socket == str(server.path)
