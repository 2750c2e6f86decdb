"""The runner's peer in unit tests: a real HTTP server on 127.0.0.1, in a thread.

`HttpServer` answers every request with a handler function; `ControlPlane` is a minimal
implementation of `docs/runner-protocol.md` (spec, started, logs, heartbeat, exit) that
records what the runner sent. The control plane's real endpoints (apps/jobs) are tested on
their own; here the runner is tested against the contract, over real sockets.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Handler = Callable[[str, str, dict, Any], "tuple[int, Any]"]


class HttpServer:
    """Serves `handler(method, path, headers, json_body) -> (status, json_answer)`.

    `stop()` closes the listening socket (connections are then refused); `start()` again
    listens on the same port.
    """

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.port = 0
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> HttpServer:
        outer = self

        class RequestHandler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else None
                status, answer = outer.handler(self.command, self.path, dict(self.headers), body)
                data = json.dumps(answer).encode() if answer is not None else b""
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _answer

            def log_message(self, format: str, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", self.port), RequestHandler)
        server.daemon_threads = True
        self.port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


class ControlPlane:
    """The runner protocol, minimally: one job, one token, lines stored once by seq.

    Set `orders` (a list) to answer the next heartbeats with those orders in turn, or
    `heartbeat_status` to answer heartbeats with an error (e.g. 409 superseded).
    """

    def __init__(self, *, job_id: str, token: str, spec: dict) -> None:
        self.job_id = job_id
        self.token = token
        self.spec = spec
        self.lock = threading.Lock()
        self.lines: dict[int, dict] = {}
        self.receipts: dict[int, int] = {}
        self.batches: list[int] = []  # lines per batch
        self.batch_bytes: list[int] = []
        self.spec_fetches = 0
        self.started: list[dict] = []
        self.heartbeats: list[dict] = []
        self.exits: list[dict] = []
        self.orders: list[str] = []
        self.heartbeat_status: tuple[int, Any] | None = None
        self.server = HttpServer(self.handle)

    @property
    def url(self) -> str:
        return self.server.url

    def handle(self, method: str, path: str, headers: dict, body: Any) -> tuple[int, Any]:
        prefix = f"/api/v1/runner/jobs/{self.job_id}/"
        if headers.get("Authorization") != f"Bearer {self.token}":
            return 401, {"error": {"type": "authentication_failed"}}
        if not path.startswith(prefix):
            return 404, {"error": {"type": "not_found"}}
        endpoint = path[len(prefix) :]
        with self.lock:
            if (method, endpoint) == ("GET", "spec"):
                self.spec_fetches += 1
                return 200, self.spec
            if (method, endpoint) == ("POST", "started"):
                self.started.append(body)
                return 200, {"order": "continue"}
            if (method, endpoint) == ("POST", "logs"):
                accepted = duplicates = 0
                self.batches.append(len(body["lines"]))
                self.batch_bytes.append(int(headers.get("Content-Length", 0)))
                for line in body["lines"]:
                    self.receipts[line["seq"]] = self.receipts.get(line["seq"], 0) + 1
                    if line["seq"] in self.lines:
                        duplicates += 1
                    else:
                        self.lines[line["seq"]] = line
                        accepted += 1
                return 200, {"accepted": accepted, "duplicates": duplicates}
            if (method, endpoint) == ("POST", "heartbeat"):
                self.heartbeats.append(body)
                if self.heartbeat_status is not None:
                    return self.heartbeat_status
                order = self.orders.pop(0) if self.orders else "continue"
                return 200, {"order": order}
            if (method, endpoint) == ("POST", "exit"):
                self.exits.append(body)
                return 200, {"ok": True}
        return 404, {"error": {"type": "not_found"}}

    def messages(self, source: str | None = None) -> list[str]:
        """The stored messages in seq order (optionally of one source)."""
        with self.lock:
            return [
                line["message"]
                for _, line in sorted(self.lines.items())
                if source is None or line["source"] == source
            ]

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError("timed out waiting for the runner")
            time.sleep(0.02)
