"""The HTTP client for `/api/v1/runner/jobs/{job_id}/...`: JSON in and out, a Bearer token.

Every answer is classified (`classify`) into one of four outcomes, and `ControlClient`
raises accordingly:

- ok: 2xx with a JSON object body (returned as a dict);
- fatal (`FatalError`): 401 (bad token) and 404 (the token is not this job's), and 400
  `{"error": {"type": "unsupported_protocol"}}` (`UnsupportedProtocolError`: the control plane
  does not speak this runner's protocol version; retrying cannot help);
- superseded (`SupersededError`): 409 `{"error": {"type": "attempt_superseded"}}`;
- retry (`RetryableError`): everything else: 5xx, refused or reset connections, timeouts,
  and also any other status (another 400, 403, 413, 3xx, a 409 of another type) and a 2xx whose
  body is not a JSON object (a proxy's page). The page names only 401, 404 and 409 as
  reasons to stop, and everything the runner sends is idempotent; an unexpected answer
  may come from a proxy or a control plane being redeployed, and killing a long training
  run for it would be worse than retrying. Retrying is bounded where it matters: after the
  workload ends, by `final_flush_timeout_s`. Each retry is reported on the runner's stderr.

Every request carries `Authorization: Bearer <token>` and `X-Trainyard-Protocol: <version>`
(`runner.protocol`).

`call_with_retry` retries retryable errors with exponential backoff (0.2 s doubling to 10 s,
with jitter) until an optional deadline or stop condition; `retrying` is how the runner calls
it: one `stop` (a `threading.Event`, or a `StopWhen`) both ends the retries and cuts the
backoff sleeps short, and every retry is reported on the runner's stderr (`log_retry`).

Artifacts (`upload_artifact`, `download`) move raw bytes, streamed from and to files, never
held in memory whole; their answers are classified the same way (a download's 2xx needs no
JSON), and they wait up to `ARTIFACT_TIMEOUT_S` on the socket, since the control plane
hashes and stores a whole upload before it answers.
"""

from __future__ import annotations

import contextlib
import enum
import gzip
import http.client
import json
import os
import random
import socket
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any, Protocol, TypeVar

from runner.control_socket import socket_opener
from runner.protocol import (
    ARTIFACT_CONTENT_TYPE,
    ERROR_ATTEMPT_SUPERSEDED,
    ERROR_SESSION_NOT_FOUND,
    ERROR_UNSUPPORTED_PROTOCOL,
    EXIT_CONFIG,
    EXIT_OK,
    EXIT_REFUSED,
    PROTOCOL_HEADER,
    PROTOCOL_VERSION,
    SHA256_HEADER,
    SHELL_ACCEPT,
    SHELL_DOWN,
    SHELL_UP,
)

REQUEST_TIMEOUT_S = 10.0
ARTIFACT_TIMEOUT_S = 120.0
DOWNLOAD_CHUNK_BYTES = 1024 * 1024
USER_AGENT = "trainyard-runner/1"

T = TypeVar("T")


class Outcome(enum.Enum):
    OK = "ok"
    RETRY = "retry"
    FATAL = "fatal"
    SUPERSEDED = "superseded"


class ClientError(Exception):
    """Base of the errors a call can raise. `status` is the HTTP status, or None."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class RetryableError(ClientError):
    """The control plane is away (5xx, refused, timed out); the call may be retried."""


class FatalError(ClientError):
    """401 or 404: the runner stops the workload and exits 1."""


class UnsupportedProtocolError(FatalError):
    """400 unsupported_protocol: the control plane does not speak this runner's protocol
    version; the runner exits 2."""


class SessionGoneError(FatalError):
    """404 session_not_found: a shell session is over on the control plane's side."""


class SupersededError(ClientError):
    """409 attempt_superseded: the runner stops the workload and exits 0."""


class RetryStopped(ClientError):
    """`call_with_retry` gave up because its stop condition became true."""


def refusal_status(error: FatalError | SupersededError) -> int:
    """The runner's exit status after the control plane refused a call with `error`."""
    if isinstance(error, SupersededError):
        return EXIT_OK
    if isinstance(error, UnsupportedProtocolError):
        return EXIT_CONFIG
    return EXIT_REFUSED


def classify(status: int, body: Any) -> Outcome:
    """The outcome of an answer with this status and (parsed JSON, or None) body."""
    if 200 <= status < 300:
        return Outcome.OK if isinstance(body, dict) else Outcome.RETRY
    if status in (401, 404):
        return Outcome.FATAL
    if status == 400 and _error_type(body) == ERROR_UNSUPPORTED_PROTOCOL:
        return Outcome.FATAL
    if status == 409 and _error_type(body) == ERROR_ATTEMPT_SUPERSEDED:
        return Outcome.SUPERSEDED
    return Outcome.RETRY


def _error_type(body: Any) -> str | None:
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        value = body["error"].get("type")
        return value if isinstance(value, str) else None
    return None


def _parse_json(raw: bytes) -> Any:
    try:
        return json.loads(raw.decode("utf-8")) if raw else None
    except ValueError:
        return None


def _read_error_body(exc: urllib.error.HTTPError) -> bytes:
    try:
        return exc.read()
    except (OSError, http.client.HTTPException):
        return b""
    finally:
        exc.close()


def _error_for(outcome: Outcome, detail: str, status: int, parsed: Any) -> ClientError:
    """The exception for a non-OK outcome of an answer."""
    error_type = _error_type(parsed)
    if outcome is Outcome.SUPERSEDED:
        return SupersededError(f"{detail} {ERROR_ATTEMPT_SUPERSEDED}", status)
    suffix = f" {error_type}" if error_type else ""
    if outcome is Outcome.FATAL:
        if error_type == ERROR_UNSUPPORTED_PROTOCOL:
            return UnsupportedProtocolError(detail + suffix, status)
        if status == 404 and error_type == ERROR_SESSION_NOT_FOUND:
            return SessionGoneError(detail + suffix, status)
        return FatalError(detail + suffix, status)
    return RetryableError(detail + suffix, status)


def _origin(url: str) -> tuple[str, str]:
    parts = urllib.parse.urlsplit(url)
    return parts.scheme.lower(), parts.netloc.lower()


class ControlClient:
    """Talks to one job's runner endpoints. Thread-safe: each call opens its own connection.

    Each call returns the answer's JSON object, or raises RetryableError, FatalError or
    SupersededError as `classify` decides.
    """

    def __init__(
        self,
        control_url: str,
        job_id: str,
        token: str,
        *,
        timeout: float = REQUEST_TIMEOUT_S,
        relay_url: str | None = None,
        control_socket: str | None = None,
    ) -> None:
        self.control_url = control_url.rstrip("/")
        self.base = f"{self.control_url}/api/v1/runner/jobs/{job_id}/"
        # Log batches and heartbeats go to the host's relay when there is one (`runner.relay`,
        # same paths); the rest, and those two whenever the relay cannot be reached, go here.
        self.relay_base = (
            f"{relay_url.rstrip('/')}/api/v1/runner/jobs/{job_id}/" if relay_url else None
        )
        self._token = token
        self.timeout = timeout
        # Through the attempt's Unix socket when there is one (a container with a network of
        # its own; a relay is then the socket server's business). Otherwise proxies from the
        # environment are honoured (a workload host may need one); urllib follows no_proxy.
        if control_socket:
            self.relay_base = None
            self._opener = socket_opener(control_socket)
        else:
            self._opener = urllib.request.build_opener()

    def _request_object(
        self, method: str, url: str, data: Any, content_type: str | None
    ) -> urllib.request.Request:
        req = urllib.request.Request(url, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self._token}")
        req.add_header("Accept", "application/json")
        req.add_header("User-Agent", USER_AGENT)
        req.add_header(PROTOCOL_HEADER, str(PROTOCOL_VERSION))
        if content_type is not None:
            req.add_header("Content-Type", content_type)
        return req

    def request(self, method: str, endpoint: str, body: Any = None) -> dict:
        data = None if body is None else json.dumps(body, ensure_ascii=False).encode("utf-8")
        req = self._request_object(
            method, self.base + endpoint, data, None if data is None else "application/json"
        )
        return self._json_answer(req, f"{method} {endpoint}", self.timeout)

    def _json_answer(self, req: urllib.request.Request, where: str, timeout: float) -> dict:
        try:
            with self._opener.open(req, timeout=timeout) as resp:
                status, raw = resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            status = exc.code
            raw = _read_error_body(exc)
        except urllib.error.URLError as exc:
            raise RetryableError(f"{where}: {exc.reason}") from exc
        except (socket.timeout, TimeoutError) as exc:  # noqa: UP041 - distinct on 3.9
            raise RetryableError(f"{where}: timed out") from exc
        except (OSError, http.client.HTTPException) as exc:
            # ConnectionResetError, RemoteDisconnected, IncompleteRead, ...
            raise RetryableError(f"{where}: {exc!r}") from exc
        parsed = _parse_json(raw)
        outcome = classify(status, parsed)
        if outcome is Outcome.OK:
            return parsed
        raise _error_for(outcome, f"{where}: HTTP {status}", status, parsed)

    def upload_artifact(self, kind: str, step: int | None, path: str, sha256: str) -> dict:
        """POST the file at `path` (a tar.gz) as an artifact, streamed from disk."""
        query = urllib.parse.urlencode({"kind": kind, "step": "" if step is None else step})
        endpoint = f"artifacts?{query}"
        with open(path, "rb") as body:
            req = self._request_object("POST", self.base + endpoint, body, ARTIFACT_CONTENT_TYPE)
            req.add_header("Content-Length", str(os.fstat(body.fileno()).st_size))
            req.add_header(SHA256_HEADER, sha256)
            try:
                return self._json_answer(
                    req, f"POST {endpoint}", max(self.timeout, ARTIFACT_TIMEOUT_S)
                )
            except RetryableError as exc:
                # 413: the artifact is over the control plane's size limit; the same bytes
                # would be refused again.
                if exc.status == 413:
                    raise FatalError(str(exc), exc.status) from None
                raise

    def download(self, url: str, out: IO[bytes]) -> int:
        """GET `url` (a path on the control plane, e.g. a spec's `download_url`) into `out`,
        which is truncated first (so a retry starts over). Returns the bytes written.

        Only the control plane's own origin is fetched: the token goes nowhere else."""
        target = urllib.parse.urljoin(self.control_url + "/", url)
        if _origin(target) != _origin(self.control_url):
            raise FatalError(f"GET {url}: not on the control plane ({self.control_url})")
        where = f"GET {urllib.parse.urlsplit(target).path}"
        req = self._request_object("GET", target, None, None)
        out.seek(0)
        out.truncate()
        written = 0
        timeout = max(self.timeout, ARTIFACT_TIMEOUT_S)
        with _call_errors(where), self._opener.open(req, timeout=timeout) as resp:
            while chunk := resp.read(DOWNLOAD_CHUNK_BYTES):
                out.write(chunk)
                written += len(chunk)
        out.flush()
        return written

    def get_spec(self) -> dict:
        return self.request("GET", "spec")

    def post_started(self, pid: int, resumed_from_step: int | None = None) -> dict:
        return self.request("POST", "started", {"pid": pid, "resumed_from_step": resumed_from_step})

    def post_log_lines(
        self, lines: list[bytes], follows: int | None = None, gzip_min_bytes: int | None = None
    ) -> dict:
        """POST a batch of lines given as the spool holds them (ASCII JSON objects), joined
        into the body as they are: no line is parsed or serialised again. `follows`: the
        last seq of a batch that may still be in flight (the control plane stores this one
        after it, so lines keep their order). A body of at least `gzip_min_bytes` goes
        gzipped (`Content-Encoding: gzip`, the fastest level: log text shrinks several
        times even so); None sends every body as it is."""
        head = b'{"lines":[' if follows is None else b'{"follows":%d,"lines":[' % follows
        data = head + b",".join(lines) + b"]}"
        compress = gzip_min_bytes is not None and len(data) >= gzip_min_bytes
        if compress:
            data = gzip.compress(data, compresslevel=1, mtime=0)
        encoding = "gzip" if compress else None
        return self._relayed("logs", data, encoding)

    def post_heartbeat(self, last_seq: int) -> dict:
        return self._relayed("heartbeat", json.dumps({"last_seq": last_seq}).encode())

    def _relayed(self, endpoint: str, data: bytes, encoding: str | None = None) -> dict:
        """POST `endpoint` by the relay when there is one; straight to the control plane when
        there is none, or when it cannot be reached (not running, refused, timed out): a
        relay that went away never holds a runner's lines back."""
        if self.relay_base is not None:
            try:
                return self._post(self.relay_base + endpoint, data, encoding)
            except RetryableError as exc:
                if exc.status is not None:  # the relay answered: its answer stands
                    raise
        return self._post(self.base + endpoint, data, encoding)

    def _post(self, url: str, data: bytes, encoding: str | None) -> dict:
        req = self._request_object("POST", url, data, "application/json")
        if encoding is not None:
            req.add_header("Content-Encoding", encoding)
        return self._json_answer(req, "POST " + url.rsplit("/", 1)[1], self.timeout)

    def post_exit(self, exit_code: int, last_seq: int) -> dict:
        return self.request("POST", "exit", {"exit_code": exit_code, "last_seq": last_seq})

    # -- shell sessions (runner.shell): long polls, so each waits past its `wait` --------

    def shell_accept(self, wait: float) -> dict:
        """`GET ssh/accept?wait=S`: `{"sessions": [...]}`, empty when none came in time."""
        endpoint = f"{SHELL_ACCEPT}?wait={wait:g}"
        req = self._request_object("GET", self.base + endpoint, None, None)
        return self._json_answer(req, f"GET {SHELL_ACCEPT}", wait + self.timeout)

    def shell_down(self, sid: str, wait: float) -> bytes:
        """`GET ssh/<sid>/down?wait=S`: the frames the client sent (raw bytes, maybe none).
        SessionGoneError once the session is over."""
        endpoint = SHELL_DOWN.format(sid=urllib.parse.quote(sid, safe=""))
        req = self._request_object("GET", f"{self.base}{endpoint}?wait={wait:g}", None, None)
        return self._bytes_answer(req, f"GET {endpoint}", wait + self.timeout)

    def shell_up(self, sid: str, frames: bytes) -> dict:
        """`POST ssh/<sid>/up` with `frames`: `{"backlog": n}`. SessionGoneError once the
        session is over."""
        endpoint = SHELL_UP.format(sid=urllib.parse.quote(sid, safe=""))
        req = self._request_object("POST", self.base + endpoint, frames, "application/octet-stream")
        return self._json_answer(req, f"POST {endpoint}", self.timeout)

    def _bytes_answer(self, req: urllib.request.Request, where: str, timeout: float) -> bytes:
        """A 2xx answer's body as it is; anything else raised as `classify` decides."""
        with _call_errors(where), self._opener.open(req, timeout=timeout) as resp:
            return resp.read()


@contextlib.contextmanager
def _call_errors(where: str):
    """Raise what a call's failure means to the runner: an HTTP error as `classify` judges
    its status and body, anything of the connection as a RetryableError."""
    try:
        yield
    except urllib.error.HTTPError as exc:
        parsed = _parse_json(_read_error_body(exc))
        outcome = classify(exc.code, parsed)
        if outcome is Outcome.OK:  # a 2xx that urllib calls an error: not one of ours
            outcome = Outcome.RETRY
        raise _error_for(outcome, f"{where}: HTTP {exc.code}", exc.code, parsed) from None
    except urllib.error.URLError as exc:
        raise RetryableError(f"{where}: {exc.reason}") from exc
    except (socket.timeout, TimeoutError) as exc:  # noqa: UP041 - distinct on 3.9
        raise RetryableError(f"{where}: timed out") from exc
    except (OSError, http.client.HTTPException) as exc:
        raise RetryableError(f"{where}: {exc!r}") from exc


def backoff_delays(initial: float = 0.2, maximum: float = 10.0):
    """Yield the nominal delays: `initial`, doubling, capped at `maximum`."""
    delay = initial
    while True:
        yield delay
        delay = min(delay * 2, maximum)


def call_with_retry(
    fn: Callable[[], T],
    *,
    deadline: float | None = None,
    should_stop: Callable[[], bool] | None = None,
    sleep: Callable[[float], object] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    on_retry: Callable[[int, RetryableError, float], object] | None = None,
    initial_delay: float = 0.2,
    max_delay: float = 10.0,
) -> T:
    """Call `fn` until it returns, retrying only RetryableError.

    Between tries it sleeps the backoff delay with equal jitter (half fixed, half random),
    never past `deadline` (a `clock()` value). FatalError and SupersededError propagate at
    once. When the deadline has passed after a failed try, the last RetryableError is
    raised; when `should_stop()` is true before a try, RetryStopped is raised. `fn` is
    always tried at least once. `on_retry(attempt, error, delay)` is told of each failure
    that will be retried.
    """
    for attempt, nominal in enumerate(backoff_delays(initial_delay, max_delay), start=1):
        try:
            return fn()
        except RetryableError as exc:
            delay = nominal / 2 + random.uniform(0, nominal / 2)
            if deadline is not None:
                remaining = deadline - clock()
                if remaining <= 0:
                    raise
                delay = min(delay, remaining)
            if should_stop is not None and should_stop():
                raise RetryStopped(f"stopped while retrying: {exc}", exc.status) from exc
            if on_retry is not None:
                on_retry(attempt, exc, delay)
            sleep(delay)
        if should_stop is not None and should_stop():
            raise RetryStopped("stopped while retrying")
    raise AssertionError("unreachable")  # backoff_delays is infinite


def log(message: str) -> None:
    """The runner's own diagnostics, on its stderr (never the job's log)."""
    print(f"runner: {message}", file=sys.stderr, flush=True)


def log_retry(attempt: int, error: RetryableError, delay: float) -> None:
    """Report a failed try that will be retried: the first, then every tenth."""
    if attempt == 1 or attempt % 10 == 0:
        log(f"{error} (try {attempt}; next in {delay:.1f} s)")


class Stop(Protocol):
    """What ends `retrying` and cuts its sleeps short; a `threading.Event` is one."""

    def is_set(self) -> bool: ...

    def wait(self, timeout: float) -> object: ...


@dataclass(frozen=True)
class StopWhen:
    """A `Stop` made of a condition and a sleep that the condition cuts short."""

    is_set: Callable[[], bool]
    wait: Callable[[float], object]


def retrying(
    fn: Callable[[], T],
    *,
    deadline: float | None = None,
    stop: Stop | None = None,
    on_retry: Callable[[int, RetryableError, float], object] | None = log_retry,
) -> T:
    """`call_with_retry` as the runner calls it: until `deadline` (a time.monotonic() value)
    or `stop.is_set()`, sleeping through `stop.wait` (plain `time.sleep` without a stop), each
    retry reported by `on_retry` (on the runner's stderr by default)."""
    return call_with_retry(
        fn,
        deadline=deadline,
        should_stop=None if stop is None else stop.is_set,
        sleep=time.sleep if stop is None else stop.wait,
        on_retry=on_retry,
    )
