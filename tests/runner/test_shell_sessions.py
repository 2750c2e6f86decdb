"""Shell sessions (runner.shell, runner.shell_session): real processes, terminals and
sockets, driven through the session's transport seam. `Pipe` stands for the control
plane's side of one session: frames the client sends go down through a queue, frames the
runner posts up are recorded."""

from __future__ import annotations

import json
import os
import pwd
import queue
import signal
import socket
import struct
import threading
import time
from pathlib import Path

import pytest

from runner import procfs, shell_session, shell_spawn
from runner.client import FatalError, SessionGoneError
from runner.protocol import (
    FRAME_CLOSE,
    FRAME_CLOSED,
    FRAME_EOF,
    FRAME_EXIT,
    FRAME_OPENED,
    FRAME_SIGNAL,
    FRAME_STDERR,
    FRAME_STDIN,
    FRAME_STDOUT,
    FRAME_WINDOW,
    decode_frames,
    encode_frame,
)
from runner.shell import ShellService
from runner.shell_session import Session, ShellEnv

TIMEOUT_S = 10.0


@pytest.fixture(autouse=True)
def sighup_as_the_runner_has_it():
    """This process stands in for the runner, which never ignores SIGHUP
    (`unignore_sighup`), even when the suite runs under `nohup`."""
    previous = signal.getsignal(signal.SIGHUP)
    shell_spawn.unignore_sighup()
    yield
    signal.signal(signal.SIGHUP, previous)


class Pipe:
    """One session's transport, in process."""

    def __init__(self) -> None:
        self.down_queue: queue.Queue[bytes] = queue.Queue()
        self.frames: list[tuple[bytes, bytes]] = []
        self.posts = 0
        self.backlog = 0  # what `up` answers
        self.gone = False
        self.cond = threading.Condition()

    # -- the runner's side (ShellTransport) ----------------------------------------------

    def down(self, sid: str, wait: float) -> bytes:
        if self.gone:
            raise SessionGoneError("GET down: HTTP 404 session_not_found", 404)
        try:
            return self.down_queue.get(timeout=wait)
        except queue.Empty:
            return b""

    def up(self, sid: str, frames: bytes) -> int:
        if self.gone:
            raise SessionGoneError("POST up: HTTP 404 session_not_found", 404)
        with self.cond:
            self.frames.extend(decode_frames(frames))
            self.posts += 1
            self.cond.notify_all()
        return self.backlog

    # -- the client's side ----------------------------------------------------------------

    def send(self, *frames: tuple[bytes, bytes]) -> None:
        self.down_queue.put(b"".join(encode_frame(kind, payload) for kind, payload in frames))

    def output(self, kind: bytes = FRAME_STDOUT) -> bytes:
        with self.cond:
            return b"".join(payload for k, payload in self.frames if k == kind)

    def wait_for(self, predicate, timeout: float = TIMEOUT_S) -> None:
        with self.cond:
            assert self.cond.wait_for(predicate, timeout), f"timed out; frames: {self.frames}"

    def wait_output(self, text: bytes, kind: bytes = FRAME_STDOUT) -> None:
        self.wait_for(lambda: text in self.output(kind))

    def wait_closed(self) -> None:
        self.wait_for(lambda: any(kind == FRAME_CLOSED for kind, _ in self.frames))

    def json_of(self, kind: bytes) -> dict:
        with self.cond:
            return json.loads(next(payload for k, payload in self.frames if k == kind))


@pytest.fixture
def where(tmp_path: Path) -> ShellEnv:
    work = tmp_path / "work"
    work.mkdir()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        "X": "from the spec",
        "TRAINYARD_JOB_ID": "job-shell-test",
        "TRAINYARD_ATTEMPT": "1",
    }
    return ShellEnv(env=env, cwd=str(work))


def run(where: ShellEnv, **request) -> tuple[Pipe, Session]:
    pipe = Pipe()
    base = {"sid": "s1", "kind": "session", "command": None, "subsystem": None, "pty": None}
    base.update(env={}, host=None, port=None)
    base.update(request)
    session = Session(base, pipe, where, wait_s=1.0).start()
    return pipe, session


def assert_framed(pipe: Pipe) -> None:
    """OPENED first, CLOSED last, exactly once each."""
    kinds = [kind for kind, _ in pipe.frames]
    assert kinds[0] == FRAME_OPENED and kinds[-1] == FRAME_CLOSED
    assert kinds.count(FRAME_OPENED) == kinds.count(FRAME_CLOSED) == 1


def test_a_command_runs_as_the_workload_in_its_environment_and_directory(where):
    command = 'printenv X; echo "${LANG-}|${EVIL-unset}"; id -un; pwd; exit 3'
    pipe, session = run(where, command=command, env={"LANG": "C.UTF-8", "EVIL": "yes"})
    pipe.wait_closed()
    user = pwd.getpwuid(os.getuid()).pw_name
    assert pipe.output() == f"from the spec\nC.UTF-8|unset\n{user}\n{where.cwd}\n".encode()
    assert pipe.json_of(FRAME_OPENED) == {"ok": True}
    assert pipe.json_of(FRAME_EXIT) == {"status": 3}
    assert_framed(pipe)
    assert session.done.wait(TIMEOUT_S)


def test_stderr_goes_in_frames_of_its_own(where):
    pipe, _ = run(where, command="echo out; echo err >&2; echo more")
    pipe.wait_closed()
    assert pipe.output(FRAME_STDOUT) == b"out\nmore\n"
    assert pipe.output(FRAME_STDERR) == b"err\n"


def test_stdin_reaches_the_process_and_eof_ends_it(where):
    pipe, _ = run(where, command="wc -c; echo done")
    payload = os.urandom(300_000)  # more than a pipe holds
    pipe.send((FRAME_STDIN, payload[:150_000]), (FRAME_STDIN, payload[150_000:]), (FRAME_EOF, b""))
    pipe.wait_closed()
    assert pipe.output().split() == [b"300000", b"done"]
    assert pipe.json_of(FRAME_EXIT) == {"status": 0}


def test_a_large_output_comes_whole_in_frames_of_at_most_64_kib(where):
    pipe, _ = run(where, command="head -c 3000000 /dev/zero | tr '\\0' x")
    pipe.wait_closed()
    assert pipe.output() == b"x" * 3_000_000
    sizes = [len(payload) for kind, payload in pipe.frames if kind == FRAME_STDOUT]
    assert max(sizes) <= 64 * 1024


def test_a_client_with_a_backlog_slows_the_session_down_and_loses_nothing(where):
    pipe, _ = run(where, command="head -c 4000000 /dev/zero | tr '\\0' y")
    pipe.backlog = 1000
    pipe.wait_for(lambda: pipe.posts >= 2)
    time.sleep(0.5)  # what is measured: how often it posts meanwhile
    with pipe.cond:
        posts, sent = pipe.posts, len(pipe.output())
        pipe.backlog = 0
    assert posts <= 8  # backing off from 50 ms, not posting as fast as it can
    assert sent < 4_000_000
    pipe.wait_closed()
    assert pipe.output() == b"y" * 4_000_000


def test_a_terminal_session_has_the_size_asked_for_and_follows_resizes(where):
    command = 'echo "term=$TERM"; stty size; read line; stty size'
    pipe, _ = run(where, command=command, pty={"term": "xterm-256color", "cols": 80, "rows": 24})
    pipe.wait_output(b"24 80")
    pipe.send((FRAME_WINDOW, b'{"cols": 132, "rows": 43}'), (FRAME_STDIN, b"\r"))
    pipe.wait_closed()
    output = pipe.output()
    assert b"term=xterm-256color" in output
    assert b"43 132" in output
    assert pipe.output(FRAME_STDERR) == b""
    assert pipe.json_of(FRAME_EXIT) == {"status": 0}


def test_a_terminal_sessions_process_has_sigpipe_as_usual(where):
    # Python ignores SIGPIPE; the shell it starts must not inherit that.
    command = "yes | head -1 >/dev/null; echo status=${PIPESTATUS[0]}"
    pipe, _ = run(where, command=command, pty={"term": "dumb", "cols": 80, "rows": 24})
    pipe.wait_closed()
    assert b"status=141" in pipe.output()


def test_a_login_shell_on_a_terminal_runs_what_is_typed(where):
    pipe, _ = run(where, pty={"term": "dumb", "cols": 80, "rows": 24})
    pipe.send((FRAME_STDIN, b"echo $((6 * 7)); tty; exit 5\r"))
    pipe.wait_closed()
    assert b"42" in pipe.output()
    assert b"/dev/pts/" in pipe.output()
    assert pipe.json_of(FRAME_EXIT) == {"status": 5}


def test_a_signal_frame_reaches_the_process_group(where):
    pipe, _ = run(where, command="echo ready; sleep 1000")
    pipe.wait_output(b"ready")
    pipe.send((FRAME_SIGNAL, b'{"name": "TERM"}'))
    pipe.wait_closed()
    assert pipe.json_of(FRAME_EXIT) in ({"signal": "TERM"}, {"status": 143})


def test_close_kills_the_process_and_its_children(where, monkeypatch):
    monkeypatch.setattr(shell_session, "CLOSE_GRACE_S", 0.3)
    # One child ignores SIGHUP: only the SIGKILL after the grace ends it.
    command = "sleep 1000 & a=$!; (trap '' HUP; exec sleep 1000) & echo $$ $a $!; wait"
    pipe, session = run(where, command=command)
    pipe.wait_output(b"\n")
    pids = [int(pid) for pid in pipe.output().split()]
    pipe.send((FRAME_CLOSE, b'{"message": "bye"}'))
    pipe.wait_closed()
    session.join_closed(TIMEOUT_S)
    assert not [pid for pid in pids if procfs.alive(pid)]
    assert pipe.json_of(FRAME_EXIT) == {"signal": "HUP"}
    assert_framed(pipe)


def test_a_runner_that_ignores_sighup_still_starts_sessions_that_die_of_it(where, monkeypatch):
    """Under `nohup` the runner inherits SIGHUP ignored; its sessions start with every signal
    at its default, as under sshd, so a close ends them with SIGHUP, not the SIGKILL after."""
    monkeypatch.setattr(shell_session, "CLOSE_GRACE_S", 30.0)
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        pipe, _ = run(where, command="echo ready; sleep 1000")
        pipe.wait_output(b"\n")
    finally:
        signal.signal(signal.SIGHUP, previous)
    began = time.monotonic()
    pipe.send((FRAME_CLOSE, b'{"message": "bye"}'))
    pipe.wait_closed()
    assert pipe.json_of(FRAME_EXIT) == {"signal": "HUP"}
    assert time.monotonic() - began < 10  # not the grace's SIGKILL


def test_a_session_gone_on_the_control_planes_side_is_killed(where):
    pipe, session = run(where, command="echo $$; sleep 1000")
    pipe.wait_output(b"\n")
    pid = int(pipe.output())
    pipe.gone = True
    pipe.send()  # the next down call learns it
    assert session.done.wait(TIMEOUT_S)
    session.join_closed(TIMEOUT_S)
    assert not procfs.alive(pid)


def test_a_broken_frame_ends_that_session_only(where, capfd):
    pipe, session = run(where, command="echo $$; sleep 1000")
    other, _ = run(where, command="read x; echo got $x")
    pipe.wait_output(b"\n")
    pipe.down_queue.put(b"\x01\x00")  # a cut header
    pipe.wait_closed()
    session.join_closed(TIMEOUT_S)
    assert not procfs.alive(int(pipe.output()))
    assert "bad frame from the control plane" in capfd.readouterr().err
    other.send((FRAME_STDIN, b"it\n"))
    other.wait_closed()
    assert other.output() == b"got it\n"


def test_bad_json_in_a_frame_ends_the_session(where):
    pipe, _ = run(where, command="sleep 1000")
    pipe.send((FRAME_WINDOW, b"{not json"))
    pipe.wait_closed()
    assert pipe.json_of(FRAME_EXIT) == {"signal": "HUP"}


def test_an_unknown_subsystem_is_refused_in_the_opened_frame(where):
    pipe, session = run(where, subsystem="x11")
    pipe.wait_closed()
    assert [kind for kind, _ in pipe.frames] == [FRAME_OPENED, FRAME_CLOSED]
    assert "unknown subsystem" in pipe.json_of(FRAME_OPENED)["error"]
    assert session.done.wait(TIMEOUT_S)


def test_a_missing_working_directory_is_refused(where, tmp_path):
    pipe, _ = run(ShellEnv(env=where.env, cwd=str(tmp_path / "nowhere")), command="true")
    pipe.wait_closed()
    assert "cannot start" in pipe.json_of(FRAME_OPENED)["error"]


def sftp_init_answer(pipe: Pipe) -> tuple[int, int]:
    pipe.send((FRAME_STDIN, struct.pack(">IBI", 5, 1, 3)))
    pipe.wait_for(lambda: len(pipe.output()) >= 9)
    _, kind, version = struct.unpack(">IBI", pipe.output()[:9])
    pipe.send((FRAME_EOF, b""))
    pipe.wait_closed()
    return kind, version


@pytest.mark.parametrize("system", [True, False], ids=["image-sftp-server", "runner-sftp-server"])
def test_the_sftp_subsystem_answers_init(where, monkeypatch, system):
    if not system:
        monkeypatch.setattr(shell_spawn, "SYSTEM_SFTP_SERVERS", ())
    elif not any(os.access(path, os.X_OK) for path in shell_spawn.SYSTEM_SFTP_SERVERS):
        pytest.skip("no sftp-server on this machine")
    pipe, _ = run(where, subsystem="sftp")
    assert sftp_init_answer(pipe) == (2, 3)  # SSH_FXP_VERSION 3
    assert pipe.json_of(FRAME_EXIT) == {"status": 0}


class EchoServer:
    """Echoes each connection's bytes back until the client shuts its side."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                while data := conn.recv(65536):
                    conn.sendall(data)


def test_a_tcp_session_relays_both_ways_until_the_far_side_closes(where):
    server = EchoServer()
    try:
        pipe, session = run(where, kind="tcp", host="127.0.0.1", port=server.port)
        payload = os.urandom(200_000)
        pipe.send((FRAME_STDIN, payload[:100_000]), (FRAME_STDIN, payload[100_000:]))
        pipe.wait_for(lambda: len(pipe.output()) >= len(payload))
        pipe.send((FRAME_EOF, b""))
        pipe.wait_closed()
        assert pipe.output() == payload
        assert pipe.json_of(FRAME_OPENED) == {"ok": True}
        assert FRAME_EXIT not in [kind for kind, _ in pipe.frames]
        assert session.done.wait(TIMEOUT_S)
    finally:
        server.sock.close()


def test_a_refused_tcp_connection_is_told_in_the_opened_frame(where):
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]  # closed again below: nothing listens there
    pipe, _ = run(where, kind="tcp", host="127.0.0.1", port=port)
    pipe.wait_closed()
    assert "cannot connect" in pipe.json_of(FRAME_OPENED)["error"]
    assert [kind for kind, _ in pipe.frames] == [FRAME_OPENED, FRAME_CLOSED]


class Acceptor(Pipe):
    """A transport that also hands out sessions (`accept`), and records its calls."""

    def __init__(self) -> None:
        super().__init__()
        self.waiting: queue.Queue[list[dict] | Exception] = queue.Queue()
        self.accepts = 0

    def accept(self, wait: float) -> list[dict]:
        self.accepts += 1
        try:
            answer = self.waiting.get(timeout=wait)
        except queue.Empty:
            return []
        if isinstance(answer, Exception):
            raise answer
        return answer


def request(sid: str, command: str) -> dict:
    return {"sid": sid, "kind": "session", "command": command, "subsystem": None, "pty": None}


def test_the_service_accepts_only_after_a_hint_and_closes_sessions_with_the_attempt(where):
    transport = Acceptor()
    service = ShellService(transport, wait_s=0.2, linger_s=60.0)
    service.hint({"order": "continue"})
    service.configure(where)
    assert transport.accepts == 0  # no hint yet
    service.hint({"order": "continue", "shell": True})
    transport.waiting.put([request("a", "echo $$; sleep 1000")])
    transport.wait_output(b"\n")
    pid = int(transport.output())
    assert set(service.sessions) == {"a"}
    service.close()
    assert not procfs.alive(pid)
    transport.wait_closed()
    assert transport.json_of(FRAME_EXIT) == {"signal": "HUP"}


def test_the_accept_loop_stops_after_the_linger_and_on_a_refused_token(where):
    transport = Acceptor()
    now = [0.0]
    service = ShellService(transport, wait_s=0.05, linger_s=10.0, clock=lambda: now[0])
    service.configure(where)
    service.hint({"shell": True})
    deadline = time.monotonic() + TIMEOUT_S
    while transport.accepts < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    now[0] = 11.0  # the linger is over
    service._thread.join(TIMEOUT_S)
    assert not service._thread.is_alive()
    service.hint({"shell": True})  # a new hint starts it again
    transport.waiting.put(FatalError("GET ssh/accept: HTTP 401", 401))
    service._thread.join(TIMEOUT_S)
    assert not service._thread.is_alive()
    calls = transport.accepts
    service.hint({"shell": True})  # refused: no more
    assert transport.accepts == calls
    assert service._thread is not None and not service._thread.is_alive()
