"""Shell sessions into a running job (`docs/runner-protocol.md`, "Shell sessions"): the
runner opens each session itself, inside the workload's environment, and carries its
bytes over its own calls to the control plane; no port is opened on the node.

`ShellService` is the runner's side: when an answer of `started`, `heartbeat` or `logs`
carries the hint (`SHELL_ANSWER_KEY: true`), its accept loop long-polls `ssh/accept` for
as long as hints keep coming and SHELL_ACCEPT_LINGER_S after the last one, and starts a
`Session` (`runner.shell_session`) per request. Errors back off; a refusal of the token
(401, 404, 409) ends the loop for good. Sessions die with the attempt: `close()` kills
every one of them and stops the loop.

Nothing here runs in the runner's own threads except `hint` (a flag and, at most, a
thread start), so no session can hold up the log sender, heartbeats or supervision.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol

from runner.client import ClientError, ControlClient, RetryableError, backoff_delays, log
from runner.protocol import SHELL_ACCEPT_LINGER_S, SHELL_ANSWER_KEY, SHELL_WAIT_MAX_S
from runner.shell_session import Session, ShellEnv, ShellTransport

__all__ = ["HttpShellTransport", "Session", "ShellEnv", "ShellService"]

MAX_SESSIONS = 64
CLOSE_TIMEOUT_S = 3.0  # the kills' grace (2 s) and a little
EMPTY_POLL_MIN_S = 0.5  # an empty answer sooner than this: the next poll waits a second


class AcceptTransport(ShellTransport, Protocol):
    """A session transport that also lists the sessions waiting (`GET ssh/accept`)."""

    def accept(self, wait: float) -> list[dict]: ...


class HttpShellTransport:
    """The sessions' calls over the runner's `ControlClient` (same token, same opener:
    the control socket when the runner has one)."""

    def __init__(self, client: ControlClient) -> None:
        self.client = client

    def accept(self, wait: float) -> list[dict]:
        sessions = self.client.shell_accept(wait).get("sessions")
        if not isinstance(sessions, list):
            raise RetryableError("GET ssh/accept: the answer lists no sessions")
        return [request for request in sessions if isinstance(request, dict)]

    def down(self, sid: str, wait: float) -> bytes:
        return self.client.shell_down(sid, wait)

    def up(self, sid: str, frames: bytes) -> int:
        backlog = self.client.shell_up(sid, frames).get("backlog", 0)
        return backlog if isinstance(backlog, int) else 0


class ShellService:
    """The accept loop and the open sessions of one attempt."""

    def __init__(
        self,
        transport: AcceptTransport,
        *,
        wait_s: float = SHELL_WAIT_MAX_S,
        linger_s: float = SHELL_ACCEPT_LINGER_S,
        max_sessions: int = MAX_SESSIONS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.transport = transport
        self.wait_s = wait_s
        self.linger_s = linger_s
        self.max_sessions = max_sessions
        self.clock = clock
        self.sessions: dict[str, Session] = {}
        self._where: ShellEnv | None = None
        self._last_hint: float | None = None
        self._running = False
        self._closed = False
        self._refused = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def configure(self, where: ShellEnv) -> None:
        """The workload started here: sessions may open from now on."""
        with self._lock:
            self._where = where
        self._ensure_loop()

    def hint(self, answer: dict) -> None:
        """Called with every answer of `started`, `heartbeat` and `logs`."""
        if answer.get(SHELL_ANSWER_KEY) is not True:
            return
        with self._lock:
            self._last_hint = self.clock()
        self._ensure_loop()

    def close(self, timeout: float = CLOSE_TIMEOUT_S) -> None:
        """The attempt is over: stop accepting, kill every session (bounded wait)."""
        with self._lock:
            self._closed = True
            sessions = list(self.sessions.values())
        self._stop.set()
        for session in sessions:
            session.close("the attempt is over")
        deadline = time.monotonic() + timeout
        for session in sessions:
            session.join_closed(max(0.0, deadline - time.monotonic()))

    def _ensure_loop(self) -> None:
        with self._lock:
            if self._running or not self._wanted():
                return
            self._running = True
        self._thread = threading.Thread(target=self._loop, name="runner-shell-accept", daemon=True)
        self._thread.start()

    def _wanted(self) -> bool:
        """Under the lock: whether the accept loop should run now."""
        if self._closed or self._refused or self._where is None or self._last_hint is None:
            return False
        return self.clock() <= self._last_hint + self.linger_s

    def _loop(self) -> None:
        delays = backoff_delays(0.5, 30.0)
        while True:
            with self._lock:
                if not self._wanted():
                    self._running = False
                    return
            began = time.monotonic()
            try:
                requests = self.transport.accept(self.wait_s)
            except RetryableError as exc:
                log(f"shell sessions: {exc}")
                self._stop.wait(next(delays))
                continue
            except ClientError as exc:  # the token was refused, or the attempt superseded
                log(f"shell sessions: {exc}; no longer accepting sessions")
                with self._lock:
                    self._refused = True
                continue
            except Exception as exc:  # a bug must not spin
                log(f"shell sessions: accepting failed: {exc!r}")
                self._stop.wait(next(delays))
                continue
            delays = backoff_delays(0.5, 30.0)
            for request in requests:
                self._open(request)
            # An empty answer long before its wait was up: a server that does not hold
            # the poll must not make the loop spin.
            if not requests and time.monotonic() - began < min(EMPTY_POLL_MIN_S, self.wait_s / 2):
                self._stop.wait(1.0)

    def _open(self, request: dict) -> None:
        sid = request.get("sid")
        if not isinstance(sid, str) or not sid:
            log(f"shell sessions: ignoring a request without a session id: {request!r}")
            return
        with self._lock:
            if self._closed or sid in self.sessions or self._where is None:
                return
            refusal = None
            if len(self.sessions) >= self.max_sessions:
                refusal = f"too many sessions ({self.max_sessions}) open in this job"
            session = Session(
                request, self.transport, self._where, wait_s=self.wait_s, on_done=self._done
            )
            self.sessions[sid] = session
        session.start(refusal=refusal)

    def _done(self, session: Session) -> None:
        with self._lock:
            if self.sessions.get(session.sid) is session:
                del self.sessions[session.sid]
