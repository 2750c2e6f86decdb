"""The runner's way out of a workload's own network: the control plane's runner API over a
Unix socket.

A container job has a network of its own (podman `slirp4netns`, or none at all): the host's
loopback, where the control plane, its Redis and its PostgreSQL listen, is out of reach.
The runner inside still talks to the control plane, through a Unix socket that the host
serves and mounts into the container (read-only, at `/run/trainyard/control.sock`):

    python3 -m runner.control_socket --socket control.sock --job JOB_ID \
        --upstream http://127.0.0.1:8000 [--relay http://127.0.0.1:8790]

One server per attempt (the local backend starts it beside the container and stops it at
release). It forwards only this job's runner calls (`/api/v1/runner/jobs/<JOB_ID>/...`)
and reads of the hub (GET and HEAD under `/hf/`, which the runner's loopback door,
runner.hub_door, carries for the workload's Hugging Face tools; the hub checks their
token): anything else is answered 403 `forbidden_path`, so the socket is no door to the web
UI, the REST API or another job. Bodies stream both ways (an artifact upload is never held in
memory); log batches and heartbeats go to the host's relay when one is named, as a runner
on the host would send them. The token travels only in the request's own header, as it
would over TCP, and is never logged.

The runner's side (`UnixHTTPHandler`) is a urllib handler that connects every request to
the socket, whatever the URL's host: the runner's control URL is then a placeholder origin
(`http://trainyard.control`) that names the control plane without pointing anywhere.
Standard library only, like the rest of `runner/`.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import socket
import socketserver
import sys
import time
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler

from runner.protocol import HUB_PATH

SOCKET_MOUNT = "/run/trainyard"  # where the socket's directory appears in a container
SOCKET_NAME = "control.sock"
# The runner's control URL when it talks through the socket: any host would do, this one
# says what it is in a log line.
SOCKET_ORIGIN = "http://trainyard.control"
UPSTREAM_TIMEOUT_S = 900.0  # an artifact upload is hashed and stored before its answer
CHUNK_BYTES = 256 * 1024
IDLE_EXIT_S = 6 * 3600.0  # a server nobody called for this long stops (a lost release)
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
    }
)
RELAYED_CALLS = ("/logs", "/heartbeat")


def allowed_prefix(job_id: str) -> str:
    return f"/api/v1/runner/jobs/{job_id}/"


# -- the runner's side -------------------------------------------------------------------


class UnixHTTPConnection(http.client.HTTPConnection):
    """An HTTP connection to a Unix socket; the URL's host only fills the Host header."""

    def __init__(self, socket_path: str, host: str, timeout: float | None = None, **_: object):
        super().__init__(host, timeout=timeout)
        self.socket_path = socket_path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if self.timeout is not None:
            sock.settimeout(self.timeout)
        try:
            sock.connect(self.socket_path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


class UnixHTTPHandler(urllib.request.HTTPHandler):
    """Sends every `http:` request of an opener to one Unix socket."""

    def __init__(self, socket_path: str) -> None:
        super().__init__()
        self.socket_path = socket_path

    def http_open(self, req: urllib.request.Request):
        def connection(host: str, timeout: float | None = None, **kwargs: object):
            return UnixHTTPConnection(self.socket_path, host, timeout=timeout)

        return self.do_open(connection, req)


def socket_opener(socket_path: str) -> urllib.request.OpenerDirector:
    """An opener whose every request goes to `socket_path`: no proxy from the environment
    (an image's HTTP_PROXY must not capture the runner's calls) and no TCP at all."""
    return urllib.request.build_opener(
        urllib.request.ProxyHandler({}), UnixHTTPHandler(socket_path)
    )


# -- the host's side ---------------------------------------------------------------------


class Upstream:
    """Where a call goes: the control plane, or the relay for log batches and heartbeats."""

    def __init__(self, control_url: str, relay_url: str | None = None) -> None:
        self.control = urllib.parse.urlsplit(control_url.rstrip("/"))
        self.relay = urllib.parse.urlsplit(relay_url.rstrip("/")) if relay_url else None

    def connection(self, path: str) -> tuple[http.client.HTTPConnection, str]:
        """A connection for a call to `path`, and the path to send it to."""
        target = self.control
        bare = path.split("?", 1)[0]
        if self.relay is not None and bare.endswith(RELAYED_CALLS):
            target = self.relay
        cls = (
            http.client.HTTPSConnection if target.scheme == "https" else http.client.HTTPConnection
        )
        return cls(target.netloc, timeout=UPSTREAM_TIMEOUT_S), target.path + path


class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, path: str, job_id: str, upstream: Upstream) -> None:
        self.job_id = job_id
        self.prefix = allowed_prefix(job_id)
        self.upstream = upstream
        self.last_call = time.monotonic()
        super().__init__(path, Handler)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Server

    def address_string(self) -> str:  # a Unix peer has no address
        return "socket"

    def log_message(self, format: str, *args: object) -> None:
        pass  # request lines carry nothing worth a line per call; errors are answered

    def do_GET(self) -> None:
        self._forward()

    def do_HEAD(self) -> None:
        self._forward()

    def do_POST(self) -> None:
        self._forward()

    def do_PUT(self) -> None:
        self._forward()

    def _refuse(self, status: int, error_type: str, message: str) -> None:
        body = json.dumps({"error": {"type": error_type, "message": message}}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _forward(self) -> None:
        self.server.last_call = time.monotonic()
        path = self.path
        hub_read = self.command in ("GET", "HEAD") and path.startswith(f"{HUB_PATH}/")
        if not (path.startswith(self.server.prefix) or hub_read) or ".." in path.split("?", 1)[0]:
            self.close_connection = True
            self._drain_request()
            self._refuse(403, "forbidden_path", "Only this job's runner calls go through here.")
            return
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            self.close_connection = True
            self._refuse(411, "length_required", "Send a Content-Length.")
            return
        length = int(self.headers.get("Content-Length") or 0)
        upstream, target = self.server.upstream.connection(path)
        try:
            upstream.putrequest(self.command, target, skip_accept_encoding=True)
            for name, value in self.headers.items():
                if name.lower() not in HOP_BY_HOP:
                    upstream.putheader(name, value)
            upstream.endheaders()
            self._copy_body(upstream, length)
            answer = upstream.getresponse()
        except (OSError, http.client.HTTPException) as exc:
            upstream.close()
            self.close_connection = True
            self._refuse(502, "upstream_unreachable", f"The control plane did not answer: {exc}")
            return
        try:
            self._answer(answer)
        finally:
            upstream.close()

    def _copy_body(self, upstream: http.client.HTTPConnection, length: int) -> None:
        left = length
        while left > 0:
            chunk = self.rfile.read(min(CHUNK_BYTES, left))
            if not chunk:
                raise ConnectionError("the runner's body ended early")
            upstream.send(chunk)
            left -= len(chunk)

    def _drain_request(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        while length > 0:
            chunk = self.rfile.read(min(CHUNK_BYTES, length))
            if not chunk:
                return
            length -= len(chunk)

    def _answer(self, answer: http.client.HTTPResponse) -> None:
        self.send_response_only(answer.status, answer.reason)
        length = answer.getheader("Content-Length")
        for name, value in answer.getheaders():
            if name.lower() not in HOP_BY_HOP:
                self.send_header(name, value)
        if length is None:  # a streamed answer: its end is the connection's
            self.close_connection = True
            self.send_header("Connection", "close")
        self.end_headers()
        while chunk := answer.read(CHUNK_BYTES):
            self.wfile.write(chunk)
            self.server.last_call = time.monotonic()


def serve(socket_path: str, job_id: str, upstream: Upstream, idle_exit_s: float) -> None:
    """Serve until SIGTERM/SIGKILL, or until nobody called for `idle_exit_s`."""
    # Bound and listening under a name of its own, then renamed into place: the path
    # appears only once a connect to it succeeds (between bind and listen, a runner that
    # found the file would be refused).
    staging = f"{socket_path}.{os.getpid()}"
    if os.path.exists(staging):
        os.unlink(staging)
    server = Server(staging, job_id, upstream)
    # A workload's user may be anyone in its image; the socket's directory is the attempt's.
    os.chmod(staging, 0o666)
    os.replace(staging, socket_path)
    server.timeout = 1.0
    try:
        while time.monotonic() - server.last_call < idle_exit_s:
            server.handle_request()
    finally:
        server.server_close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m runner.control_socket")
    parser.add_argument("--socket", required=True, help="the socket's path (relative: to cwd)")
    parser.add_argument("--job", required=True, help="the job whose runner calls pass")
    parser.add_argument("--upstream", required=True, help="the control plane's URL")
    parser.add_argument("--relay", default=None, help="the host relay's URL, if any")
    parser.add_argument("--idle-exit-s", type=float, default=IDLE_EXIT_S)
    args = parser.parse_args(argv)
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", args.job):
        parser.error("--job: not a job id")
    for url in filter(None, (args.upstream, args.relay)):
        if not url.startswith(("http://", "https://")):
            parser.error(f"{url}: must start with http:// or https://")
    print(f"control socket for {args.job} at {args.socket} -> {args.upstream}", flush=True)
    serve(args.socket, args.job, Upstream(args.upstream, args.relay), args.idle_exit_s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
