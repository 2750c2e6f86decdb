"""A real HTTP receiver on loopback for webhook tests: a standard-library server in a
thread that records every request and answers the status codes it is told, in turn."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Received:
    at: float  # time.monotonic() when it arrived
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    url: str
    statuses: list[int]  # answered in turn; the last one from then on
    requests: list[Received] = field(default_factory=list)


@contextmanager
def loopback_receiver(statuses: list[int] | None = None) -> Iterator[Receiver]:
    receiver = Receiver(url="", statuses=list(statuses or [200]))

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            receiver.requests.append(
                Received(time.monotonic(), self.path, dict(self.headers.items()), body)
            )
            turn = min(len(receiver.requests), len(receiver.statuses)) - 1
            self.send_response(receiver.statuses[turn])
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            self.wfile.write(b"ok" if receiver.statuses[turn] < 300 else b"receiver is down")

        def log_message(self, *args) -> None:  # quiet
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}/hooks/trainyard"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
