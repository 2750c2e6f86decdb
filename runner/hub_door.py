"""HF_ENDPOINT inside a workload's own network: a door on its loopback to the control
plane's hub.

A container job has no route to the control plane (runner.control_socket); the runner
inside reaches it through the attempt's Unix socket. Hugging Face tools speak TCP, so the
runner serves `127.0.0.1:<free port>` in the workload's network and carries each request
over the socket: `HF_ENDPOINT=http://127.0.0.1:<port>/hf`. Only reads pass (GET and HEAD
under the hub's path); the request's own `Authorization` (the workload's HF_TOKEN) travels
with it, and the hub decides. Bodies stream; nothing is kept.

Standard library only, like the rest of `runner/`.
"""

from __future__ import annotations

import http.client
import json
import re
import socketserver
import threading
from http.server import BaseHTTPRequestHandler

from runner.control_socket import CHUNK_BYTES, HOP_BY_HOP, UnixHTTPConnection

UPSTREAM_TIMEOUT_S = 600.0
SOCKET_HOST = "trainyard.control"
ABSOLUTE_URL = re.compile(r"https?://[^/\s<>]+(?P<rest>/[^\s<>]*)")


class HubDoor(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, socket_path: str, hub_path: str) -> None:
        self.socket_path = socket_path
        self.hub_path = hub_path.rstrip("/")
        super().__init__(("127.0.0.1", 0), _Handler)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}{self.hub_path}"

    def start(self) -> HubDoor:
        threading.Thread(target=self.serve_forever, name="hub-door", daemon=True).start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: HubDoor

    def log_message(self, format: str, *args: object) -> None:
        pass  # the workload's downloads are its own business, not the job's log

    def do_GET(self) -> None:
        self._forward()

    def do_HEAD(self) -> None:
        self._forward()

    def do_POST(self) -> None:
        self._refuse(405, "Only reads reach the hub from a workload.")

    do_PUT = do_DELETE = do_PATCH = do_POST

    def _refuse(self, status: int, message: str) -> None:
        body = json.dumps({"error": message}).encode()
        self.close_connection = True
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Error-Message", message)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _here(self, value: str) -> str:
        """A Link or Location of the hub's, pointed at this door: the hub names the host it
        was asked on, which the workload cannot reach (a tree's next page, a redirect)."""
        origin = f"http://127.0.0.1:{self.server.server_address[1]}"
        return ABSOLUTE_URL.sub(lambda match: origin + match["rest"], value)

    def _forward(self) -> None:
        bare = self.path.split("?", 1)[0]
        if not bare.startswith(f"{self.server.hub_path}/") or ".." in bare:
            self._refuse(403, "Only the hub is served here.")
            return
        upstream = UnixHTTPConnection(
            self.server.socket_path, SOCKET_HOST, timeout=UPSTREAM_TIMEOUT_S
        )
        try:
            upstream.putrequest(self.command, self.path, skip_accept_encoding=True)
            for name, value in self.headers.items():
                if name.lower() not in HOP_BY_HOP:
                    upstream.putheader(name, value)
            upstream.endheaders()
            answer = upstream.getresponse()
        except (OSError, http.client.HTTPException) as exc:
            upstream.close()
            self._refuse(502, f"The control plane did not answer: {exc}")
            return
        try:
            self.send_response_only(answer.status, answer.reason)
            length = answer.getheader("Content-Length")
            for name, value in answer.getheaders():
                if name.lower() in ("link", "location"):
                    value = self._here(value)
                if name.lower() not in HOP_BY_HOP:
                    self.send_header(name, value)
            if length is None:
                self.close_connection = True
                self.send_header("Connection", "close")
            self.end_headers()
            while chunk := answer.read(CHUNK_BYTES):
                self.wfile.write(chunk)
        except OSError:
            self.close_connection = True
        finally:
            upstream.close()
