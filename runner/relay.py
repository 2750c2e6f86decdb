"""A relay for the runners of one host: it takes their log batches and heartbeats and carries
them to the control plane many at a time, in one `POST /api/v1/runner/relay` (a bundle), so
a host running a hundred attempts costs the control plane a few requests a second, not a
hundred (docs/runner-protocol.md, "Relaying").

    python -m runner.relay --listen 127.0.0.1:8790 --upstream https://trainyard.example.com
    python3 runner-….pyz relay --listen ... --upstream ...      (the bundle, on a far host)

A runner uses it when its environment has `TRAINYARD_RELAY_URL` (a provider's `relay_url`
puts it there). It posts `jobs/<id>/logs` and `jobs/<id>/heartbeat` here exactly as it would
to the control plane, and gets the answer the control plane gave its entry: the same status
and body. `GET /status` says how many bundles and calls went (`{"bundles", "relayed",
"passed_through"}`). Everything else (spec, started, exit, uploads) it sends to the control plane
itself, and so it does with these two whenever the relay cannot be reached.

How it forwards: in two lanes, log batches and heartbeats, each one bundle at a time. While
a lane's bundle is out, what runners post to it waits; when its answer is back, everything
waiting goes in the next (up to `--max-entries` entries and about `--max-bytes`). An idle
host's call goes at once, a busy host's go together, and since a lane's bundles go in the
order runners posted, a batch's predecessor is always stored first. Heartbeats go to
`POST relay?calls=heartbeat` in bundles of their own, so a heartbeat never waits behind a
bundle of batches (which takes the control plane far longer to store) and the control
plane's admission control lets it in as a heartbeat. A bundle of batches leaves at most
every `--batch-interval-ms` (200): on a busy host the batches of a fifth of a second go
together, in fewer and bigger bundles (the control plane's cost is mostly per request); an
idle host's batch still goes at once, as does every heartbeat.
What it does not bundle goes through on its own, as posted: a gzipped or large body, one
that is not a JSON object, one of another protocol version. A bundle the control plane
refuses as a whole (an older one without `relay`) is sent again entry by entry; one it
cannot answer (down, 5xx) is answered 502 to each runner, which retries, its lines spooled.

It holds tokens only in memory, while their call is on its way, and never logs them; it
listens on loopback unless told otherwise. Standard library only, like the rest of `runner/`.
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import json
import re
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from runner.protocol import (
    PROTOCOL_HEADER,
    PROTOCOL_VERSION,
    RELAY_CALL_HEARTBEAT,
    RELAY_CALL_LOGS,
    RELAY_HEARTBEATS_QUERY,
    RELAY_MAX_ENTRIES,
    RELAY_PATH,
)

CALL_PATH = re.compile(r"^/api/v1/runner/jobs/([A-Za-z0-9_-]{1,64})/(logs|heartbeat)$")
MAX_BODY_BYTES = 8 * 1024 * 1024  # what a runner may post here at most
INLINE_MAX_BYTES = 256 * 1024  # a bigger body goes through on its own
BUNDLE_MAX_BYTES = 2 * 1024 * 1024
GZIP_MIN_BYTES = 32 * 1024
UPSTREAM_TIMEOUT_S = 30.0
# A bundle of batches leaves at most this often: a busy host's batches gather meanwhile, so
# its bundles are fewer and bigger (each costs the control plane a request and a
# transaction); an idle host's batch still goes at once. Heartbeats never wait for it.
BATCH_INTERVAL_S = 0.2
USER_AGENT = "trainyard-relay/1"

Answer = tuple[int, bytes]


def _error(status: int, error_type: str, message: str) -> Answer:
    body = {"error": {"type": error_type, "message": message, "param": None}}
    return status, json.dumps(body).encode()


@dataclass
class Call:
    """A runner's call waiting for its answer."""

    job_id: str
    token: str
    call: str
    body: bytes  # a JSON object, as the runner sent it
    done: threading.Event = field(default_factory=threading.Event)
    answer: Answer = (0, b"")

    def settle(self, answer: Answer) -> None:
        self.answer = answer
        self.done.set()


class Upstream:
    """Requests to the control plane."""

    def __init__(self, url: str, timeout: float = UPSTREAM_TIMEOUT_S) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._opener = urllib.request.build_opener()

    def post(self, path: str, body: bytes, headers: dict[str, str]) -> Answer:
        """(status, body) of the control plane's answer; raises OSError when there is none
        (refused, reset, timed out)."""
        req = urllib.request.Request(self.url + path, data=body, method="POST")
        req.add_header("User-Agent", USER_AGENT)
        req.add_header("Content-Type", "application/json")
        for name, value in headers.items():
            req.add_header(name, value)
        try:
            with self._opener.open(req, timeout=self.timeout) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            try:
                return exc.code, exc.read()
            finally:
                exc.close()
        except urllib.error.URLError as exc:
            raise OSError(str(exc.reason)) from exc
        except http.client.HTTPException as exc:
            raise OSError(repr(exc)) from exc

    def call(self, call: Call) -> Answer:
        """`call` sent on its own, to its own endpoint."""
        headers = {"Authorization": f"Bearer {call.token}", PROTOCOL_HEADER: str(PROTOCOL_VERSION)}
        path = f"/api/v1/runner/jobs/{call.job_id}/{call.call}"
        return self.post(path, call.body, headers)


class Lane:
    """The calls of one kind waiting to go, where their bundles go, and how long after a
    bundle left the next may leave (`min_interval_s`: while it runs, calls gather)."""

    def __init__(self, path: str, min_interval_s: float = 0.0) -> None:
        self.path = path
        self.min_interval_s = min_interval_s
        self.waiting: deque[Call] = deque()
        self.ready = threading.Condition()
        self.last_sent = float("-inf")  # time.monotonic() when the last bundle left


class Relay:
    """Two lanes of waiting calls, each with the thread that forwards it one bundle at a
    time: log batches, and heartbeats. A heartbeat never waits for a bundle of batches in
    flight, nor a batch for a heartbeat; within a lane, calls leave in the order posted."""

    def __init__(
        self,
        upstream: Upstream,
        *,
        max_entries: int = RELAY_MAX_ENTRIES,
        max_bytes: int = BUNDLE_MAX_BYTES,
        batch_interval_s: float = BATCH_INTERVAL_S,
    ) -> None:
        self.upstream = upstream
        self.max_entries = max(1, min(max_entries, RELAY_MAX_ENTRIES))
        self.max_bytes = max_bytes
        self.lanes = {
            RELAY_CALL_LOGS: Lane(RELAY_PATH, max(0.0, batch_interval_s)),
            RELAY_CALL_HEARTBEAT: Lane(f"{RELAY_PATH}?{RELAY_HEARTBEATS_QUERY}"),
        }
        self._stopped = False
        self._counting = threading.Lock()
        self.counts = {"bundles": 0, "relayed": 0, "passed_through": 0}

    def start(self) -> None:
        """Start each lane's forwarding thread."""
        for name, lane in self.lanes.items():
            thread = threading.Thread(
                target=self.forward_forever, args=(lane,), name=f"relay-{name}", daemon=True
            )
            thread.start()

    def count(self, name: str, how_many: int = 1) -> None:
        with self._counting:
            self.counts[name] += how_many

    def submit(self, call: Call, timeout: float) -> Answer:
        """Queue `call` in its lane and wait, at most `timeout` seconds, for its answer."""
        lane = self.lanes[call.call]
        with lane.ready:
            lane.waiting.append(call)
            lane.ready.notify()
        if not call.done.wait(timeout):
            return _error(504, "relay_timeout", "The control plane did not answer in time.")
        return call.answer

    def stop(self) -> None:
        for lane in self.lanes.values():
            with lane.ready:
                self._stopped = True
                lane.ready.notify_all()

    def forward_forever(self, lane: Lane) -> None:
        while True:
            with lane.ready:
                while not self._stopped:
                    due = lane.last_sent + lane.min_interval_s - time.monotonic()
                    full = len(lane.waiting) >= self.max_entries
                    if lane.waiting and (due <= 0 or full):
                        break
                    lane.ready.wait(due if lane.waiting else None)
                if self._stopped:
                    return
                bundle = self._take(lane.waiting)
                lane.last_sent = time.monotonic()
            try:
                self._forward(lane.path, bundle)
            except Exception as exc:
                for call in bundle:
                    if not call.done.is_set():
                        call.settle(_error(502, "relay_failed", f"The relay failed: {exc!r}"))

    def _take(self, waiting: deque[Call]) -> list[Call]:
        bundle, size = [], 0
        while waiting and len(bundle) < self.max_entries:
            call = waiting[0]
            if bundle and size + len(call.body) > self.max_bytes:
                break
            bundle.append(waiting.popleft())
            size += len(call.body) + len(call.token) + 64
        return bundle

    def _forward(self, path: str, bundle: list[Call]) -> None:
        try:
            status, raw = self.upstream.post(path, *_bundle_body(bundle))
        except OSError as exc:
            answer = _error(502, "relay_upstream", f"The control plane cannot be reached: {exc}")
            for call in bundle:
                call.settle(answer)
            return
        self.count("bundles")
        results = _results(status, raw, len(bundle))
        if results is not None:
            for call, (entry_status, body) in zip(bundle, results, strict=True):
                call.settle((entry_status, body))
            self.count("relayed", len(bundle))
        elif status >= 500:
            for call in bundle:
                call.settle((status, raw))  # the runner retries
        else:
            # Refused as a whole (a control plane without `relay`, say): each on its own.
            for call in bundle:
                try:
                    call.settle(self.upstream.call(call))
                except OSError as exc:
                    call.settle(_error(502, "relay_upstream", f"No answer: {exc}"))


def _bundle_body(bundle: list[Call]) -> tuple[bytes, dict[str, str]]:
    """The bundle's body, each entry's `body` as its runner sent it (no re-encoding)."""
    parts = []
    for call in bundle:
        head = json.dumps({"job_id": call.job_id, "token": call.token, "call": call.call})
        parts.append(head[:-1].encode() + b', "body": ' + call.body + b"}")
    body = b'{"entries": [' + b", ".join(parts) + b"]}"
    headers = {PROTOCOL_HEADER: str(PROTOCOL_VERSION)}
    if len(body) >= GZIP_MIN_BYTES:
        body = gzip.compress(body, compresslevel=1, mtime=0)
        headers["Content-Encoding"] = "gzip"
    return body, headers


def _results(status: int, raw: bytes, count: int) -> list[Answer] | None:
    """Each entry's (status, body) from a bundle's answer, or None if it is not one."""
    if status != 200:
        return None
    try:
        results = json.loads(raw).get("results")
    except (ValueError, AttributeError, RecursionError):
        return None
    if not isinstance(results, list) or len(results) != count:
        return None
    answers = []
    for result in results:
        if not isinstance(result, dict) or not isinstance(result.get("status"), int):
            return None
        answers.append((result["status"], json.dumps(result.get("body")).encode()))
    return answers


def _bundled_body(raw: bytes) -> bool:
    """Whether `raw` may travel inside a bundle: a JSON object (which the control plane's
    reading of the bundle will read as the runner's own request would have been)."""
    try:
        return isinstance(json.loads(raw), dict)
    except (ValueError, RecursionError):
        return False


class Handler(BaseHTTPRequestHandler):
    server: RelayServer
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        match = CALL_PATH.match(self.path)
        if match is None:
            self._answer(_error(404, "not_found", "A relay carries logs and heartbeats only."))
            return
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            self._answer(_error(411, "length_required", "Content-Length is required."))
            return
        if int(length) > MAX_BODY_BYTES:
            self._answer(_error(413, "payload_too_large", "The body is too large."))
            self.close_connection = True
            return
        raw = self.rfile.read(int(length))
        scheme, _, token = (self.headers.get("Authorization") or "").partition(" ")
        call = Call(job_id=match[1], token=token.strip(), call=match[2], body=raw or b"{}")
        version = self.headers.get(PROTOCOL_HEADER, "1").strip()
        bundled = (
            scheme.lower() == "bearer"
            and call.token
            and version == str(PROTOCOL_VERSION)
            and not self.headers.get("Content-Encoding")
            and len(call.body) <= INLINE_MAX_BYTES
            and _bundled_body(call.body)
        )
        if bundled:
            self._answer(self.server.relay.submit(call, self.server.call_timeout))
            return
        self.server.relay.count("passed_through")
        headers = {
            name: self.headers[name]
            for name in ("Authorization", PROTOCOL_HEADER, "Content-Encoding")
            if self.headers.get(name)
        }
        try:
            self._answer(self.server.relay.upstream.post(self.path, raw, headers))
        except OSError as exc:
            self._answer(_error(502, "relay_upstream", f"No answer: {exc}"))

    def do_GET(self) -> None:
        """`GET /status`: how many bundles went, how many calls were relayed in them and how
        many passed through on their own (counts since the relay started)."""
        if self.path != "/status":
            self._answer(_error(404, "not_found", "Not found."))
            return
        self._answer((200, json.dumps(self.server.relay.counts).encode()))

    def _answer(self, answer: Answer) -> None:
        status, body = answer
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass  # no access log: a line per call would be the host's busiest file


class RelayServer(ThreadingHTTPServer):
    daemon_threads = True
    # A host's runners open a connection per call. With socketserver's backlog of 5, a
    # burst while the accepting thread waited for a core had the kernel drop the rest of
    # the connections, and each runner's call waited a second or more to connect again.
    request_queue_size = 1024

    def __init__(self, address: tuple[str, int], relay: Relay, call_timeout: float) -> None:
        super().__init__(address, Handler)
        self.relay = relay
        self.call_timeout = call_timeout


def serve(
    listen: tuple[str, int],
    upstream_url: str,
    *,
    max_entries: int = RELAY_MAX_ENTRIES,
    batch_interval_s: float = BATCH_INTERVAL_S,
) -> RelayServer:
    """A started relay (its forwarding threads running); `serve_forever` it, then
    `shutdown` and `relay.stop()`."""
    relay = Relay(
        Upstream(upstream_url), max_entries=max_entries, batch_interval_s=batch_interval_s
    )
    server = RelayServer(listen, relay, call_timeout=UPSTREAM_TIMEOUT_S)
    relay.start()
    return server


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise argparse.ArgumentTypeError("expected HOST:PORT")
    return host, int(port)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="runner.relay", description=__doc__.split("\n")[0])
    parser.add_argument("--listen", type=_address, default=("127.0.0.1", 8790))
    parser.add_argument("--upstream", required=True, help="the control plane's base URL")
    parser.add_argument("--max-entries", type=int, default=RELAY_MAX_ENTRIES)
    parser.add_argument(
        "--batch-interval-ms",
        type=float,
        default=BATCH_INTERVAL_S * 1000,
        help="least time between two bundles of log batches (0: one as soon as the last is back)",
    )
    args = parser.parse_args(argv)
    if not args.upstream.startswith(("http://", "https://")):
        parser.error("--upstream must start with http:// or https://")
    server = serve(
        args.listen,
        args.upstream,
        max_entries=args.max_entries,
        batch_interval_s=args.batch_interval_ms / 1000,
    )
    host, port = server.server_address[:2]
    print(json.dumps({"listening": f"http://{host}:{port}"}), flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.relay.stop()
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
