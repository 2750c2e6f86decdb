"""One shell session (`runner.shell`): a process in the workload's environment, or a TCP
connection from it, whose bytes travel as frames (`runner.protocol`) over a transport.

Threads of a session, none shared with the runner's own loops:

- up: takes frames from the `Outbox` and posts them (several per call, at most
  UP_POST_MAX_BYTES), slowing down while the client's backlog is over SHELL_UP_BACKLOG_MAX;
- down: long-polls the client's frames and applies them in order (stdin goes through a
  queue to the writer, so a process that does not read never holds a signal or a close up);
- pump: reads the process's output (or the connection) into the outbox, which is bounded,
  so a client that does not read makes the process wait on its own output;
- waiter: waits for the process to end (without reaping it: while it is a zombie, its
  group and session ids cannot be reused, so killing them stays safe), drains its output,
  then sends FRAME_EXIT and FRAME_CLOSED;
- writer: feeds stdin (or the connection).

`close` (FRAME_CLOSE, the session gone on the control plane's side, bad frames, the runner
shutting down) sends SIGHUP to the process's group and session and SIGKILL to what is left
after CLOSE_GRACE_S. A process that ends by itself leaves what it put in the background
alone, as sshd does: that dies with the attempt (`kill_leftovers`, by the markers).
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import selectors
import signal
import socket
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from runner import procfs, shell_spawn
from runner.client import ClientError, RetryableError, backoff_delays, log
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
    SHELL_UP_BACKLOG_MAX,
    SHELL_WAIT_MAX_S,
    decode_frames,
    encode_frame,
)

READ_CHUNK_BYTES = 64 * 1024  # at most one frame's worth of output per read
UP_POST_MAX_BYTES = 256 * 1024
OUTBOX_LIMIT_BYTES = 1024 * 1024
STDIN_LIMIT_BYTES = 1024 * 1024  # stdin not yet written before `down` is polled again
DRAIN_TIMEOUT_S = 1.0  # output still read after the process ended (a background child)
CLOSE_GRACE_S = 2.0  # SIGHUP, then SIGKILL
CONNECT_TIMEOUT_S = 10.0
THROTTLE_MAX_S = 1.0
SIGNALS = frozenset(
    {"ABRT", "ALRM", "FPE", "HUP", "ILL", "INT", "KILL", "PIPE", "QUIT", "SEGV", "TERM"}
    | {"USR1", "USR2", "CONT", "STOP", "TSTP", "WINCH"}
)
_EOF = object()  # stdin: the client sends no more
_STOP = object()  # stdin: the session is over


class ShellTransport(Protocol):
    """The control plane's side of sessions (`HttpShellTransport`). `down` and `up` raise
    `RetryableError` when the call may be tried again and another `ClientError`
    (`SessionGoneError`: 404 session_not_found) when the session is over."""

    def down(self, sid: str, wait: float) -> bytes: ...

    def up(self, sid: str, frames: bytes) -> int: ...


@dataclass(frozen=True)
class ShellEnv:
    """Where a session runs: the workload's environment and working directory."""

    env: dict[str, str]
    cwd: str


class _OpenError(Exception):
    """The session cannot start; the message goes to the client in FRAME_OPENED."""


class Outbox:
    """Frames waiting for `up`, in order. At most `limit` bytes wait: `put` blocks until the
    up thread took some. `seal` adds the last frames; nothing is taken after them."""

    def __init__(self, limit: int = OUTBOX_LIMIT_BYTES) -> None:
        self._frames: deque[bytes] = deque()
        self._size = 0
        self._limit = limit
        self._sealed = False
        self._closed = False
        self._cond = threading.Condition()

    def put(self, kind: bytes, payload: bytes = b"") -> bool:
        """Queue `payload` as frames of `kind` (split at READ_CHUNK_BYTES); False once the
        outbox is sealed or closed."""
        start = 0
        while True:
            chunk = payload[start : start + READ_CHUNK_BYTES]
            with self._cond:
                while self._size >= self._limit and not (self._sealed or self._closed):
                    self._cond.wait()
                if self._sealed or self._closed:
                    return False
                self._append(encode_frame(kind, chunk))
            start += READ_CHUNK_BYTES
            if start >= len(payload):
                return True

    def seal(self, *frames: tuple[bytes, bytes]) -> None:
        """Queue the session's last frames, past the limit; later puts are refused."""
        with self._cond:
            if self._sealed or self._closed:
                return
            for kind, payload in frames:
                self._append(encode_frame(kind, payload))
            self._sealed = True
            self._cond.notify_all()

    def close(self) -> None:
        """Nothing more goes up (the session is gone): wake and refuse everyone."""
        with self._cond:
            self._closed = True
            self._frames.clear()
            self._size = 0
            self._cond.notify_all()

    def take(self, max_bytes: int, wait: bool) -> tuple[list[bytes], bool] | None:
        """(frames of at most `max_bytes` in all (one at least), whether they end the
        session); with `wait`, blocks until there are some. None when nothing will come."""
        with self._cond:
            while wait and not self._frames and not self._closed and not self._sealed:
                self._cond.wait()
            if self._closed or (self._sealed and not self._frames):
                return None
            taken: list[bytes] = []
            size = 0
            while self._frames and (not taken or size + len(self._frames[0]) <= max_bytes):
                frame = self._frames.popleft()
                taken.append(frame)
                size += len(frame)
            self._size -= size
            self._cond.notify_all()
            return taken, self._sealed and not self._frames

    def _append(self, frame: bytes) -> None:
        self._frames.append(frame)
        self._size += len(frame)
        self._cond.notify_all()


class Session:
    """One request of `GET ssh/accept` (a `ShellRequest`), carried until it ends. `start()`
    returns at once; `done` is set when the last frame went up or the session is gone."""

    def __init__(
        self,
        request: dict,
        transport: ShellTransport,
        where: ShellEnv,
        *,
        wait_s: float = SHELL_WAIT_MAX_S,
        on_done: Callable[[Session], None] | None = None,
    ) -> None:
        self.request = request
        self.sid = str(request.get("sid"))
        self.transport = transport
        self.where = where
        self.wait_s = wait_s
        self.on_done = on_done
        self.done = threading.Event()
        self.outbox = Outbox()
        self._gone = threading.Event()  # the control plane no longer has the session
        self._closing = threading.Event()
        self._proc: subprocess.Popen | None = None
        self._master: int | None = None  # the terminal's master side, with a PTY
        self._sock: socket.socket | None = None
        self._stdin: queue.Queue = queue.Queue()
        self._stdin_pending = 0
        self._stdin_cond = threading.Condition()
        self._life_lock = threading.Lock()  # opening against closing
        self._fd_lock = threading.Lock()  # the terminal's master fd against its closing
        self._master_in: int | None = None  # a dup of the master fd for the writer
        self._reap_lock = threading.Lock()
        self._reaped = False
        self._killer: threading.Thread | None = None
        self._wake_r, self._wake_w = os.pipe()  # stops the pump
        self._pump_done = threading.Event()

    # -- life ---------------------------------------------------------------------------

    def start(self, refusal: str | None = None) -> Session:
        """Open the session in a thread of its own (a connection may take a while) and
        carry it; with `refusal`, only tell the client why it is not opened."""
        self._thread(self._up_loop, "up")
        self._thread(lambda: self._begin(refusal), "open")
        return self

    def _begin(self, refusal: str | None) -> None:
        try:
            if refusal is not None:
                raise _OpenError(refusal)
            self._open()
        except Exception as exc:
            if not isinstance(exc, _OpenError):  # a bug: the client still hears of it
                log(f"shell session {self.sid}: opening failed: {exc!r}")
                exc = _OpenError("the runner could not open the session")
            self.outbox.seal((FRAME_OPENED, _json({"error": str(exc)})), (FRAME_CLOSED, b""))
            self._close_wake()
            return
        self.outbox.put(FRAME_OPENED, _json({"ok": True}))
        if self._master is not None:
            self._master_in = os.dup(self._master)  # the writer's own, closed by it
        self._thread(self._down_loop, "down")
        self._thread(self._pump, "pump")
        self._thread(self._writer, "stdin")
        if self._proc is not None:
            self._thread(self._waiter, "wait")

    def close(self, reason: str) -> None:
        """End the session: kill what runs (SIGHUP, SIGKILL after CLOSE_GRACE_S) or shut the
        connection. Returns at once; `join_closed` waits for the kill."""
        with self._life_lock:
            if self._closing.is_set():
                return
            self._closing.set()
            sock, proc = self._sock, self._proc
        log(f"shell session {self.sid}: closing ({reason})")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        if proc is not None:
            self._killer = self._thread(self._kill, "kill")
        self._stdin.put(_STOP)

    def join_closed(self, timeout: float) -> None:
        killer = self._killer
        if killer is not None:
            killer.join(timeout)

    def _lost(self, reason: str) -> None:
        """The control plane no longer has the session: nothing more goes up."""
        self._gone.set()
        self.outbox.close()
        self.close(reason)
        self._set_done()

    def _set_done(self) -> None:
        if not self.done.is_set():
            self.done.set()
            if self.on_done is not None:
                self.on_done(self)

    def _thread(self, target: Callable[[], None], name: str) -> threading.Thread:
        def run() -> None:
            try:
                target()
            except Exception as exc:  # a bug ends this session, nothing else
                log(f"shell session {self.sid}: {name} failed: {exc!r}")
                self.close(f"{name} failed")

        thread = threading.Thread(target=run, name=f"runner-shell-{name}", daemon=True)
        thread.start()
        return thread

    # -- opening ------------------------------------------------------------------------

    def _open(self) -> None:
        kind = self.request.get("kind")
        if kind == "tcp":
            self._open_tcp()
        elif kind == "session":
            self._open_process()
        else:
            raise _OpenError(f"unknown session kind {kind!r}")

    def _open_tcp(self) -> None:
        host, port = self.request.get("host"), self.request.get("port")
        if not isinstance(host, str) or not host or not isinstance(port, int):
            raise _OpenError("a tcp session needs a host and a port")
        if not 0 < port < 65536:
            raise _OpenError(f"bad port {port}")
        try:
            sock = socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S)
        except OSError as exc:
            raise _OpenError(f"cannot connect to {host}:{port}: {_why(exc)}") from None
        sock.settimeout(None)
        with self._life_lock:
            if self._closing.is_set():
                sock.close()
                raise _OpenError("closed while opening")
            self._sock = sock

    def _open_process(self) -> None:
        command, subsystem = self.request.get("command"), self.request.get("subsystem")
        pty = self.request.get("pty")
        if command is not None and not isinstance(command, str):
            raise _OpenError("the command is not a string")
        if pty is not None and not isinstance(pty, dict):
            raise _OpenError("bad terminal request")
        requested = self.request.get("env") or {}
        term = pty.get("term") if pty else None
        env = dict(self.where.env)
        env.update(
            shell_spawn.client_env(
                requested if isinstance(requested, dict) else {},
                term if isinstance(term, str) else None,
            )
        )
        if subsystem is not None:
            if subsystem != "sftp":
                raise _OpenError(f"unknown subsystem {subsystem!r}")
            executable, argv, env = shell_spawn.sftp_argv(env)
            pty = None  # SFTP speaks binary on plain pipes
        else:
            shell = shell_spawn.login_shell(env)
            if shell is None:
                raise _OpenError("no shell found ($SHELL, /bin/bash, /bin/sh)")
            executable, argv = shell_spawn.shell_argv(shell, command)
        with self._life_lock:
            if self._closing.is_set():
                raise _OpenError("closed while opening")
            try:
                if pty:
                    cols, rows = _size(pty)
                    self._proc, self._master = shell_spawn.spawn_pty(
                        executable, argv, env, self.where.cwd, cols, rows
                    )
                else:
                    self._proc = shell_spawn.spawn_piped(executable, argv, env, self.where.cwd)
            except (OSError, ValueError, TypeError) as exc:
                raise _OpenError(f"cannot start {argv[0]}: {_why(exc)}") from None

    # -- up -----------------------------------------------------------------------------

    def _up_loop(self) -> None:
        throttle = 0.0
        while not self._gone.is_set():
            if throttle:
                if self._gone.wait(throttle):
                    return
                throttle = min(throttle * 2, THROTTLE_MAX_S)
            taken = self.outbox.take(UP_POST_MAX_BYTES, wait=not throttle)
            if taken is None:
                return
            frames, final = taken
            backlog = self._post(b"".join(frames))
            if backlog is None:
                return
            if final:
                self._set_done()
                return
            over = backlog > SHELL_UP_BACKLOG_MAX  # the client is slow: post less often
            throttle = (throttle or 0.05) if over else 0.0

    def _post(self, body: bytes) -> int | None:
        """Post `body` until it is taken: the client's backlog, or None when gone."""
        delays = backoff_delays(0.2, 5.0)
        while not self._gone.is_set():
            try:
                return self.transport.up(self.sid, body)
            except RetryableError as exc:
                log(f"shell session {self.sid}: {exc}")
                self._gone.wait(next(delays))
            except ClientError as exc:
                self._lost(str(exc))
        return None

    # -- down ---------------------------------------------------------------------------

    def _down_loop(self) -> None:
        delays = backoff_delays(0.2, 5.0)
        while not self._gone.is_set() and not self.done.is_set():
            with self._stdin_cond:
                while self._stdin_pending > STDIN_LIMIT_BYTES and not self._closing.is_set():
                    self._stdin_cond.wait(1.0)
            try:
                data = self.transport.down(self.sid, self.wait_s)
            except RetryableError as exc:
                log(f"shell session {self.sid}: {exc}")
                self._gone.wait(next(delays))
                continue
            except ClientError as exc:
                self._lost(str(exc))
                return
            delays = backoff_delays(0.2, 5.0)
            try:
                for kind, payload in decode_frames(data):
                    self._apply(kind, payload)
            except ValueError as exc:
                log(f"shell session {self.sid}: bad frame from the control plane: {exc}")
                self.close("bad frame")
                return
            if self._closing.is_set():
                return

    def _apply(self, kind: bytes, payload: bytes) -> None:
        """Carry out one frame from the client; ValueError when it is malformed."""
        if self._closing.is_set():
            return
        if kind == FRAME_STDIN:
            if payload:
                with self._stdin_cond:
                    self._stdin_pending += len(payload)
                self._stdin.put(payload)
        elif kind == FRAME_EOF:
            self._stdin.put(_EOF)
        elif kind == FRAME_WINDOW:
            cols, rows = _size(_load(payload))
            with self._fd_lock, contextlib.suppress(OSError):
                if self._master is not None:
                    shell_spawn.set_window(self._master, cols, rows)
                    os.killpg(os.tcgetpgrp(self._master), signal.SIGWINCH)
        elif kind == FRAME_SIGNAL:
            name = _load(payload).get("name")
            if not isinstance(name, str):
                raise ValueError("a signal frame without a name")
            name = name.upper().removeprefix("SIG")
            if name in SIGNALS:
                self._signal_group(getattr(signal, "SIG" + name))
            else:
                log(f"shell session {self.sid}: ignoring signal {name!r}")
        elif kind == FRAME_CLOSE:
            message = _load(payload).get("message")
            self.close(f"closed by the client: {message}" if message else "closed by the client")
        else:
            log(f"shell session {self.sid}: ignoring a frame of kind {kind!r}")

    def _writer(self) -> None:
        """Feed stdin in order; after an error (the process closed its stdin) input is
        dropped."""
        broken = False
        while True:
            item = self._stdin.get()
            if item is _EOF or item is _STOP:
                self._end_input()
                if item is _STOP:
                    self._release_input()
                    return
                broken = True
                continue
            try:
                if not broken:
                    self._write_all(item)
            except OSError:
                broken = True
            finally:
                with self._stdin_cond:
                    self._stdin_pending -= len(item)
                    self._stdin_cond.notify_all()

    def _write_all(self, data: bytes) -> None:
        if self._sock is not None:
            self._sock.sendall(data)
            return
        fd = self._master_in if self._master_in is not None else self._stdin_fd()
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]

    def _stdin_fd(self) -> int:
        assert self._proc is not None and self._proc.stdin is not None
        return self._proc.stdin.fileno()

    def _end_input(self) -> None:
        with contextlib.suppress(OSError):
            if self._sock is not None:
                self._sock.shutdown(socket.SHUT_WR)
            elif self._proc is not None and self._proc.stdin is not None:
                self._proc.stdin.close()
            # A terminal has no end of input of its own: the client's ^D is a byte.

    def _release_input(self) -> None:
        """The writer is the last to use the connection and its copy of the terminal."""
        with contextlib.suppress(OSError):
            if self._sock is not None:
                self._pump_done.wait()  # shut down already: the pump sees its end soon
                self._sock.close()
            if self._master_in is not None:
                os.close(self._master_in)
                self._master_in = None

    # -- output -------------------------------------------------------------------------

    def _pump(self) -> None:
        """Read the output into the outbox until every source ends or the pump is woken."""
        sources: dict[int, bytes] = {}
        if self._sock is not None:
            sources[self._sock.fileno()] = FRAME_STDOUT
        elif self._master is not None:
            sources[self._master] = FRAME_STDOUT
        elif self._proc is not None:
            assert self._proc.stdout is not None and self._proc.stderr is not None
            sources[self._proc.stdout.fileno()] = FRAME_STDOUT
            sources[self._proc.stderr.fileno()] = FRAME_STDERR
        try:
            with selectors.DefaultSelector() as selector:
                for fd in sources:
                    selector.register(fd, selectors.EVENT_READ)
                selector.register(self._wake_r, selectors.EVENT_READ)
                while sources:
                    for key, _ in selector.select():
                        if key.fd == self._wake_r:
                            return
                        data = self._read(key.fd)
                        if not data:
                            selector.unregister(key.fd)
                            del sources[key.fd]
                        elif not self.outbox.put(sources[key.fd], data):
                            return
        finally:
            self._pump_done.set()
            if self._sock is not None:  # a connection ends when its far side does
                with contextlib.suppress(OSError):
                    self._sock.shutdown(socket.SHUT_RDWR)
                self.outbox.seal((FRAME_CLOSED, b""))
                self._stdin.put(_STOP)
                self._close_wake()

    def _read(self, fd: int) -> bytes:
        try:
            return os.read(fd, READ_CHUNK_BYTES)
        except OSError:  # EIO: the terminal's last user is gone
            return b""

    def _waiter(self) -> None:
        proc = self._proc
        assert proc is not None
        result = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
        if not self._pump_done.wait(DRAIN_TIMEOUT_S):
            os.write(self._wake_w, b"x")  # a background child holds the output open
            self._pump_done.wait(DRAIN_TIMEOUT_S)
        self.outbox.seal((FRAME_EXIT, _json(_how_it_ended(result))), (FRAME_CLOSED, b""))
        with self._reap_lock:
            proc.wait()
            self._reaped = True
        self._stdin.put(_STOP)
        for handle in (proc.stdout, proc.stderr):
            if handle is not None:
                handle.close()
        with self._fd_lock:
            if self._master is not None:
                os.close(self._master)
                self._master = None
        self._close_wake()

    # -- signals ------------------------------------------------------------------------

    def _signal_group(self, signum: int) -> None:
        with self._reap_lock:
            if self._proc is not None and not self._reaped:
                with contextlib.suppress(OSError):
                    os.killpg(self._proc.pid, signum)

    def _kill(self) -> None:
        """SIGHUP the process's group and session, SIGKILL what is left after the grace.
        Holding the reap lock: the leader stays unreaped, so its ids are not reused."""
        proc = self._proc
        assert proc is not None
        with self._reap_lock:
            if self._reaped:
                return
            deadline = time.monotonic() + CLOSE_GRACE_S
            for signum in (signal.SIGHUP, signal.SIGCONT):
                _signal_each(_members(proc.pid), signum)
            while _members(proc.pid) and time.monotonic() < deadline:
                time.sleep(0.02)
            for _ in range(10):
                left = _members(proc.pid)
                if not left:
                    break
                _signal_each(left, signal.SIGKILL)
                time.sleep(0.02)

    def _close_wake(self) -> None:
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._wake_r = self._wake_w = -1


def _members(leader: int) -> list[int]:
    """Live processes of the group or the session `leader` leads."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            info = procfs.stat(int(entry))
            if info is None or info.state in {"Z", "X"}:
                continue
            if leader in (info.pgid, info.session):
                found.append(info.pid)
    return found


def _signal_each(pids: list[int], signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signum)


def _how_it_ended(result: os.waitid_result) -> dict:
    if result.si_code == os.CLD_EXITED:
        return {"status": result.si_status}
    try:
        return {"signal": signal.Signals(result.si_status).name.removeprefix("SIG")}
    except ValueError:
        return {"signal": str(result.si_status)}


def _size(value: object) -> tuple[int, int]:
    if not isinstance(value, dict):
        raise ValueError("a window size is an object")
    cols, rows = value.get("cols"), value.get("rows")
    if not isinstance(cols, int) or not isinstance(rows, int) or cols < 0 or rows < 0:
        raise ValueError("a window size needs cols and rows")
    return cols, rows


def _load(payload: bytes) -> dict:
    try:
        value = json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"bad JSON in a frame: {exc}") from None
    if not isinstance(value, dict):
        raise ValueError("a frame's JSON is not an object")
    return value


def _json(value: dict) -> bytes:
    return json.dumps(value).encode()


def _why(exc: BaseException) -> str:
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
