"""Shell sessions through the whole runner: `python -m runner` against a peer that hints at
sessions in its answers and serves `ssh/accept`, `ssh/<sid>/down` and `ssh/<sid>/up`
over HTTP, directly and through the control socket."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from runner import procfs
from runner.client import ControlClient, FatalError, SessionGoneError
from runner.control_socket import SOCKET_ORIGIN
from runner.protocol import (
    FRAME_CLOSED,
    FRAME_EXIT,
    FRAME_OPENED,
    FRAME_STDOUT,
    decode_frames,
)
from runner.shell import HttpShellTransport
from tests.live import ROOT, wait_until
from tests.runner.peer import ControlPlane, HttpServer
from tests.runner.test_agent import JOB, TOKEN, launch, script, spec

__all__ = ["launch"]  # the fixture, used by name

TIMEOUT_S = 15.0


class ShellPlane(ControlPlane):
    """The peer, with shell sessions: `open(request)` hands a session to the runner."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.waiting: queue.Queue[dict] = queue.Queue()
        self.downs: dict[str, queue.Queue[bytes]] = {}
        self.ups: dict[str, list[tuple[bytes, bytes]]] = {}
        self.cond = threading.Condition()

    def open(self, sid: str, **request: Any) -> None:
        base = {"sid": sid, "kind": "session", "command": None, "subsystem": None, "pty": None}
        base.update(env={}, host=None, port=None)
        base.update(request)
        with self.cond:
            self.downs[sid] = queue.Queue()
            self.ups[sid] = []
        self.waiting.put(base)

    def handle(self, method: str, path: str, headers: dict, body: Any) -> tuple[int, Any]:
        prefix = f"/api/v1/runner/jobs/{self.job_id}/ssh/"
        if not path.startswith(prefix):
            status, answer = super().handle(method, path, headers, body)
            if status == 200 and path.rsplit("/", 1)[-1] in ("started", "heartbeat", "logs"):
                answer = {**answer, "shell": True}
            return status, answer
        if headers.get("Authorization") != f"Bearer {TOKEN}":
            return 401, {"error": {"type": "authentication_failed"}}
        parts = urlsplit(path)
        wait = min(float(parse_qs(parts.query).get("wait", ["0"])[0]), 1.0)
        call = parts.path[len(prefix) :]
        if call == "accept":
            try:
                return 200, {"sessions": [self.waiting.get(timeout=wait)]}
            except queue.Empty:
                return 200, {"sessions": []}
        sid, _, direction = call.partition("/")
        if sid not in self.downs:
            return 404, {"error": {"type": "session_not_found"}}
        if direction == "down":
            try:
                return 200, self.downs[sid].get(timeout=wait)
            except queue.Empty:
                return 200, b""
        with self.cond:
            self.ups[sid].extend(decode_frames(body))
            self.cond.notify_all()
        return 200, {"backlog": 0}

    def frames(self, sid: str, kind: bytes) -> list[bytes]:
        with self.cond:
            return [payload for k, payload in self.ups[sid] if k == kind]

    def wait_closed(self, sid: str) -> None:
        with self.cond:
            closed = lambda: any(k == FRAME_CLOSED for k, _ in self.ups[sid])  # noqa: E731
            assert self.cond.wait_for(closed, TIMEOUT_S), self.ups[sid]


WORKLOAD = script(
    """
    echo started
    while [ ! -e release ]; do sleep 0.02; done
    echo released
    """
)


@pytest.fixture
def shell_plane():
    plane = ShellPlane(job_id=JOB, token=TOKEN, spec=spec(script_b64=WORKLOAD))
    plane.server.start()
    yield plane
    plane.server.stop()


def run_sessions(plane: ShellPlane, runner) -> None:
    """A session that reads the workload's environment, one left running, then one that
    lets the workload end: the runner then closes the one still open and exits 0."""
    plane.open("env", command="printenv USER_VAR TRAINYARD_JOB_ID HF_TOKEN; pwd; env")
    plane.wait_closed("env")
    stdout = b"".join(plane.frames("env", FRAME_STDOUT)).decode()
    first = stdout.splitlines()
    assert first[:3] == ["x", JOB, "hf_resolvedSecretValue"]
    assert first[3].endswith("/attempt/work")
    assert "TRAINYARD_RUNNER_TOKEN" not in stdout and TOKEN not in stdout
    assert json.loads(plane.frames("env", FRAME_EXIT)[0]) == {"status": 0}

    plane.open("lingering", command="sleep 1000 & echo $!; wait")
    wait_until(lambda: plane.frames("lingering", FRAME_STDOUT), timeout=TIMEOUT_S, what="pid")
    pid = int(b"".join(plane.frames("lingering", FRAME_STDOUT)))
    assert json.loads(plane.frames("lingering", FRAME_OPENED)[0]) == {"ok": True}

    plane.open("release", command="touch release")
    assert runner.wait(TIMEOUT_S) == 0
    assert not procfs.alive(pid)
    assert plane.exits and plane.exits[0]["exit_code"] == 0


def test_sessions_run_in_the_workloads_environment_and_die_with_it(shell_plane, launch):
    run_sessions(shell_plane, launch(shell_plane))


def test_sessions_go_through_the_control_socket(shell_plane, launch, tmp_path):
    argv = [sys.executable, "-m", "runner.control_socket", "--socket", "control.sock"]
    server = subprocess.Popen(
        [*argv, "--job", JOB, "--upstream", shell_plane.url],
        cwd=tmp_path,
        env={"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT)},
    )
    try:
        path = tmp_path / "control.sock"
        wait_until(path.exists, timeout=10, what="the control socket")
        runner = launch(
            shell_plane, TRAINYARD_CONTROL_URL=SOCKET_ORIGIN, TRAINYARD_CONTROL_SOCKET=str(path)
        )
        run_sessions(shell_plane, runner)
    finally:
        server.kill()
        server.wait(10)


def test_the_clients_shell_calls_move_raw_frames_and_tell_a_gone_session():
    seen: list[tuple[str, str, str | None, Any]] = []

    def handler(method: str, path: str, headers: dict, body: Any) -> tuple[int, Any]:
        seen.append((method, path, headers.get("Content-Type"), body))
        if path.endswith("/ssh/accept?wait=20"):
            return 200, {"sessions": [{"sid": "ss_1", "kind": "tcp"}]}
        if "/ssh/ss_1/" in path:
            return (200, b"e\x00\x00\x00\x00") if method == "GET" else (200, {"backlog": 3})
        if "/ssh/ss_gone/" in path:
            return 404, {"error": {"type": "session_not_found"}}
        return 404, {"error": {"type": "not_found"}}

    server = HttpServer(handler).start()
    try:
        client = ControlClient(server.url, JOB, TOKEN)
        transport = HttpShellTransport(client)
        assert transport.accept(20) == [{"sid": "ss_1", "kind": "tcp"}]
        assert transport.down("ss_1", 0.5) == b"e\x00\x00\x00\x00"
        assert transport.up("ss_1", b"o\x00\x00\x00\x02hi") == 3
        with pytest.raises(SessionGoneError):
            transport.down("ss_gone", 0.5)
        with pytest.raises(SessionGoneError):
            transport.up("ss_gone", b"")
        with pytest.raises(FatalError) as refused:
            transport.down("ss_other", 0.5)
        assert not isinstance(refused.value, SessionGoneError)
    finally:
        server.stop()
    prefix = f"/api/v1/runner/jobs/{JOB}/ssh/"
    assert [(method, path) for method, path, _, _ in seen[:3]] == [
        ("GET", prefix + "accept?wait=20"),
        ("GET", prefix + "ss_1/down?wait=0.5"),
        ("POST", prefix + "ss_1/up"),
    ]
    assert seen[2][2:] == ("application/octet-stream", b"o\x00\x00\x00\x02hi")
