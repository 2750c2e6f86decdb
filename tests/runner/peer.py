"""The runner's peer in unit tests: a real HTTP server on 127.0.0.1, in a thread.

`HttpServer` answers every request with a handler function; `ControlPlane` is a minimal
implementation of `docs/runner-protocol.md` (spec, started, logs, heartbeat, exit, artifact
upload and download) that records what the runner sent. The control plane's real endpoints
(apps/jobs) are tested on their own; here the runner is tested against the contract, over real
sockets.
"""

from __future__ import annotations

import gzip
import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

Handler = Callable[[str, str, dict, Any], "tuple[int, Any]"]


class HttpServer:
    """Serves `handler(method, path, headers, json_body) -> (status, json_answer)`.

    A JSON body sent gzipped (`Content-Encoding: gzip`) is unpacked first; a body that is
    not `application/json` reaches the handler as raw bytes; an answer that is
    `bytes` goes out as it is (`application/octet-stream`).

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
                content_type = self.headers.get("Content-Type") or "application/json"
                if content_type.startswith("application/json"):
                    if self.headers.get("Content-Encoding") == "gzip":
                        raw = gzip.decompress(raw)
                    body = json.loads(raw) if raw else None
                else:
                    body = raw
                status, answer = outer.handler(self.command, self.path, dict(self.headers), body)
                if isinstance(answer, bytes):
                    data, content_type = answer, "application/octet-stream"
                else:
                    data = json.dumps(answer).encode() if answer is not None else b""
                    content_type = "application/json"
                self.send_response(status)
                self.send_header("Content-Type", content_type)
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
    `heartbeat_status` to answer heartbeats with an error (e.g. 409 superseded), or
    `spec_status` to answer `GET spec` with one, or `log_statuses` to answer the next log
    batches with errors. `requests` records (method, endpoint,
    headers with lowercase names) of every request.

    Artifacts: every upload try is recorded in `upload_tries`; `upload_statuses` (a list)
    answers the next tries with those statuses in turn (e.g. 503 to make the runner retry);
    an accepted upload lands in `uploads` (kind, step, sha256 header, body) once per
    (kind, step). `downloads` maps a path (`/api/v1/...`) to the bytes it serves;
    `download_statuses` answers the next downloads with errors, like `upload_statuses`.
    """

    def __init__(self, *, job_id: str, token: str, spec: dict) -> None:
        self.job_id = job_id
        self.token = token
        self.spec = spec
        self.lock = threading.Lock()
        self.lines: dict[int, dict] = {}
        self.receipts: dict[int, int] = {}
        self.batches: list[int] = []  # lines per batch
        self.batch_bytes: list[int] = []  # as sent: compressed when it went gzipped
        self.batch_encodings: list[str | None] = []  # each batch's Content-Encoding
        self.follows: list[tuple[int | None, int]] = []  # each batch's (`follows`, first seq)
        self.log_statuses: list[int] = []  # answers for the next log batches, in turn
        # The order a batch's answer carries, as today's control plane does; None answers
        # as an older one did, with no order.
        self.batch_order: str | None = None
        self.spec_fetches = 0
        self.started: list[dict] = []
        self.heartbeats: list[dict] = []
        self.exits: list[dict] = []
        self.orders: list[str] = []
        self.heartbeat_status: tuple[int, Any] | None = None
        self.spec_status: tuple[int, Any] | None = None
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.upload_tries: list[dict] = []
        self.upload_statuses: list[int] = []
        self.uploads: list[dict] = []
        self.downloads: dict[str, bytes] = {}
        self.download_tries: list[str] = []
        self.download_statuses: list[int] = []
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
            lowered = {name.lower(): value for name, value in headers.items()}
            self.requests.append((method, endpoint, lowered))
            if method == "POST" and endpoint.startswith("artifacts?"):
                return self._upload(endpoint, headers, body)
            if method == "GET" and path in self.downloads:
                self.download_tries.append(path)
                if self.download_statuses:
                    return self.download_statuses.pop(0), {"error": {"type": "unavailable"}}
                return 200, self.downloads[path]
            if (method, endpoint) == ("GET", "spec"):
                self.spec_fetches += 1
                if self.spec_status is not None:
                    return self.spec_status
                return 200, self.spec
            if (method, endpoint) == ("POST", "started"):
                self.started.append(body)
                return 200, {"order": "continue"}
            if (method, endpoint) == ("POST", "logs"):
                if self.log_statuses:
                    return self.log_statuses.pop(0), {"error": {"type": "unavailable"}}
                accepted = duplicates = 0
                self.follows.append((body.get("follows"), body["lines"][0]["seq"]))
                self.batches.append(len(body["lines"]))
                self.batch_bytes.append(int(headers.get("Content-Length", 0)))
                self.batch_encodings.append(headers.get("Content-Encoding"))
                for line in body["lines"]:
                    self.receipts[line["seq"]] = self.receipts.get(line["seq"], 0) + 1
                    if line["seq"] in self.lines:
                        duplicates += 1
                    else:
                        self.lines[line["seq"]] = line
                        accepted += 1
                answer = {"accepted": accepted, "duplicates": duplicates}
                if self.batch_order is not None:
                    answer["order"] = self.batch_order
                return 200, answer
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

    def _upload(self, endpoint: str, headers: dict, body: bytes) -> tuple[int, Any]:
        headers = {name.lower(): value for name, value in headers.items()}
        query = parse_qs(endpoint.partition("?")[2], keep_blank_values=True)
        kind, step = query["kind"][0], query["step"][0]
        upload = {
            "kind": kind,
            "step": int(step) if step else None,
            "sha256": headers.get("x-trainyard-sha256"),
            "content_type": headers.get("content-type"),
            "body": body,
            # What the plane had been told when the upload arrived.
            "messages_before": [line["message"] for _, line in sorted(self.lines.items())],
        }
        self.upload_tries.append(upload)
        if self.upload_statuses:
            return self.upload_statuses.pop(0), {"error": {"type": "unavailable"}}
        for number, stored in enumerate(self.uploads, start=1):
            if (stored["kind"], stored["step"]) == (upload["kind"], upload["step"]):
                return 200, {"id": f"art_{number}", "sha256": stored["sha256"]}
        self.uploads.append(upload)
        return 201, {"id": f"art_{len(self.uploads)}", "sha256": upload["sha256"]}

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
