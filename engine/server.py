"""The HTTP front: `http.server.ThreadingHTTPServer`, one thread per connection, HTTP/1.1.

- Every request needs `Authorization: Bearer <secret>` (compared in constant time), /health
  included; anything else is 401 before the path is even looked at.
- Errors are `engine.errors` bodies. A body is read only after its Content-Length (or, for a
  chunked body, its running size) is checked against the route's cap; an answer sent before a
  body was read whole closes the connection, so a keep-alive client never has its next request
  parsed out of the middle of a body.
- Generation streams are server-sent events over chunked transfer encoding, one chunk per
  event, each written as soon as its text is decoded. While a handler waits for its request's
  next event it looks at its socket every `POLL_S`: a client that has hung up (or a write that
  fails) cancels the request, and the scheduler drops its row at the next step.
- One log line per request on stdout: `engine: METHOD PATH STATUS MS`.
"""

from __future__ import annotations

import hmac
import json
import queue
import select
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from engine.config import EngineConfig, valid_name
from engine.errors import ApiError, error_body, invalid
from engine.model import AdapterError
from engine.openai_shapes import DONE, Shapes, usage
from engine.params import Generation, parse_chat, parse_completion, parse_load, parse_unload
from engine.registry import Registry
from engine.scheduler import Aborted, Delta, Failed, Finished, Request
from engine.uploads import store_adapter
from runner.protocol import SHA256_HEADER

JSON_LIMIT = 1 << 20  # 1 MiB
UPLOAD_LIMIT = 512 << 20  # 512 MiB
READ_CHUNK = 1 << 20
POLL_S = 0.05
ADAPTERS_PREFIX = "/trainyard/adapters/"
_print_lock = threading.Lock()


def log(line: str) -> None:
    """One line on stdout, whole, whichever thread writes it."""
    with _print_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


class ClientGone(Exception):
    """The client hung up; its request is cancelled and nothing more is sent."""


@dataclass
class App:
    """What every handler shares."""

    config: EngineConfig
    secret: bytes
    registry: Registry
    backend: Any  # engine.local.LocalBackend or engine.vllm.VllmBackend
    forwarding: bool  # True for vllm: generation is forwarded to the child

    def __post_init__(self) -> None:
        self._active = 0
        self._active_lock = threading.Condition()

    def enter(self) -> None:
        with self._active_lock:
            self._active += 1

    def leave(self) -> None:
        with self._active_lock:
            self._active -= 1
            self._active_lock.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        """Until no handler is busy with a request, at most `timeout` seconds."""
        with self._active_lock:
            return self._active_lock.wait_for(lambda: self._active == 0, timeout)


class EngineServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128
    app: App


def make_server(host: str, port: int) -> EngineServer:
    """Bound and listening (connections queue until `serve_forever`); `app` is set later."""
    return EngineServer((host, port), Handler)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "trainyard-engine"
    timeout = 300  # a client that neither reads nor writes for this long is dropped
    server: EngineServer

    def do_GET(self) -> None:
        self._dispatch()

    def do_POST(self) -> None:
        self._dispatch()

    def do_PUT(self) -> None:
        self._dispatch()

    def do_DELETE(self) -> None:
        self._dispatch()

    def do_PATCH(self) -> None:
        self._dispatch()

    def log_message(self, format: str, *args: Any) -> None:
        pass  # one line per request is written by _dispatch instead

    # -- dispatch ----------------------------------------------------------------------------

    def _dispatch(self) -> None:
        self.app = self.server.app
        started = time.monotonic()
        self._status = 0
        self._body_read = False
        self._headers_sent = False
        self._last_look = started
        path = urlsplit(self.path).path
        self.app.enter()
        try:
            self._authorize()
            self._route(path)()
        except ApiError as error:
            self._send_error(error)
        except (ClientGone, ConnectionError, TimeoutError):
            self.close_connection = True  # nobody is listening for an answer
        except Exception:
            traceback.print_exc(file=sys.stderr)
            self._send_error(ApiError(500, "internal_error", "the engine failed; see its log"))
        finally:
            self.app.leave()
            elapsed = (time.monotonic() - started) * 1000
            log(f"engine: {self.command} {path[:200]} {self._status or '-'} {elapsed:.1f}ms")

    def _authorize(self) -> None:
        header = self.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            token.strip().encode(), self.app.secret
        ):
            raise ApiError(401, "unauthorized", "a valid 'Authorization: Bearer' header is needed")

    def _route(self, path: str) -> Callable[[], None]:
        if path.startswith(ADAPTERS_PREFIX):
            methods = {"PUT": self._upload}
        else:
            methods = {
                "/health": {"GET": self._health},
                "/v1/models": {"GET": self._models},
                "/v1/completions": {"POST": lambda: self._generate(chat=False)},
                "/v1/chat/completions": {"POST": lambda: self._generate(chat=True)},
                "/v1/load_lora_adapter": {"POST": self._load},
                "/v1/unload_lora_adapter": {"POST": self._unload},
                "/trainyard/stats": {"GET": self._stats},
            }.get(path)
        if methods is None:
            raise ApiError(404, "not_found", f"no such path: {path[:200]}")
        handler = methods.get(self.command)
        if handler is None:
            self._allow = ", ".join(methods)
            raise ApiError(405, "method_not_allowed", f"{path[:200]} takes {self._allow}")
        return handler

    # -- small routes ------------------------------------------------------------------------

    def _health(self) -> None:
        self._send_json(200, {"status": "ok"})

    def _models(self) -> None:
        self._send_json(200, {"object": "list", "data": self.app.registry.models()})

    def _stats(self) -> None:
        self._send_json(200, self.app.registry.stats())

    def _upload(self) -> None:
        name = unquote(urlsplit(self.path).path[len(ADAPTERS_PREFIX) :])
        if not valid_name(name):
            raise invalid("the adapter name must match [A-Za-z0-9._-]{1,100}", "name")
        if self.app.registry.taken(name):
            raise ApiError(400, "adapter_exists", f"an adapter named {name!r} is loaded")
        path = store_adapter(
            self._body(UPLOAD_LIMIT),
            name=name,
            adapters_dir=self.app.config.adapters_dir,
            sha256=self.headers.get(SHA256_HEADER),
        )
        self._send_json(200, {"lora_path": str(path)})

    def _load(self) -> None:
        app = self.app
        name, path = parse_load(self._json(), base_name=app.registry.base_name)
        path = str(Path(path).expanduser().absolute())
        app.registry.reserve(name, path)
        try:
            app.backend.load_adapter(name, path)
        except AdapterError as error:
            app.registry.forget(name)
            raise invalid(str(error), "lora_path") from None
        except BaseException:
            app.registry.forget(name)
            raise
        app.registry.commit(name)
        self._send_json(200, {"lora_name": name, "loaded": True})

    def _unload(self) -> None:
        name = parse_unload(self._json())
        self.app.registry.unload(name)
        self._send_json(200, {"lora_name": name, "unloaded": True})

    # -- generation ------------------------------------------------------------------------

    def _generate(self, *, chat: bool) -> None:
        raw = self._raw_json()
        body = _json_object(raw)
        limit = self.app.backend.max_model_len
        generation = (parse_chat if chat else parse_completion)(body, max_model_len=limit)
        if self.app.forwarding:
            self._forward(generation, raw)
            return
        request = self.app.backend.start(generation)
        shapes = Shapes(chat=chat, model=generation.model)
        try:
            if generation.stream:
                self._stream(request, shapes, include_usage=generation.include_usage)
            else:
                self._answer(request, shapes)
        except (ClientGone, OSError):
            request.cancel()
            raise ClientGone() from None
        except BaseException:
            request.end(Failed("the request's handler failed"))  # no row left generating
            raise

    def _answer(self, request: Request, shapes: Shapes) -> None:
        texts: list[str] = []
        while True:
            event = self._next_event(request)
            if isinstance(event, Delta):
                texts.append(event.text)
            elif isinstance(event, Finished):
                tokens = usage(event.prompt_tokens, event.completion_tokens)
                self._send_json(200, shapes.answer("".join(texts), event.reason, tokens))
                return
            else:
                raise _event_error(event)

    def _stream(self, request: Request, shapes: Shapes, *, include_usage: bool) -> None:
        self._start_stream()
        first = shapes.first_chunk()
        if first is not None:
            self._send_event(first)
        while True:
            event = self._next_event(request)
            if isinstance(event, Delta):
                self._send_event(shapes.delta_chunk(event.text))
                continue
            if isinstance(event, Finished):
                self._send_event(shapes.last_chunk(event.reason))
                if include_usage:
                    tokens = usage(event.prompt_tokens, event.completion_tokens)
                    self._send_event(shapes.usage_chunk(tokens))
            else:
                self._send_event(_event_error(event).body())
            self._write_chunk(DONE)
            self._end_stream()
            return

    def _next_event(self, request: Request) -> Any:
        # The socket is looked at every POLL_S even while events keep coming: a whole answer
        # writes nothing until it is done, so no failed write would tell.
        while True:
            now = time.monotonic()
            if now - self._last_look >= POLL_S:
                self._last_look = now
                if self._client_gone():
                    raise ClientGone()
            try:
                return request.events.get(timeout=POLL_S)
            except queue.Empty:
                pass

    def _client_gone(self) -> bool:
        """True when the client closed its end (a read would answer EOF)."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True

    def _forward(self, generation: Generation, raw: bytes) -> None:
        """vllm: send the body on to the child and its answer back as it comes."""
        registry = self.app.registry
        adapter = registry.acquire(generation.model)
        cancelled = False
        connection = None
        try:
            try:
                connection, response = self.app.backend.request("POST", self._path(), raw)
            except OSError as error:
                raise ApiError(
                    502, "upstream_unavailable", f"vllm did not answer: {error}"
                ) from None
            kind = response.getheader("Content-Type", "application/json")
            if not kind.startswith("text/event-stream"):
                self._send_bytes(response.status, kind, response.read())
                return
            self._start_stream()
            while True:
                try:
                    piece = response.read1(READ_CHUNK)
                except OSError:
                    piece = b""
                if not piece:
                    break
                try:
                    self._write_chunk(piece)
                except OSError:
                    cancelled = True
                    raise ClientGone() from None
            self._end_stream()
        finally:
            if connection is not None:
                connection.close()  # vLLM aborts a request whose connection closes
            registry.release(adapter, cancelled=cancelled)

    def _path(self) -> str:
        return urlsplit(self.path).path

    # -- bodies ------------------------------------------------------------------------------

    def _raw_json(self) -> bytes:
        return b"".join(self._body(JSON_LIMIT))

    def _json(self) -> dict[str, Any]:
        return _json_object(self._raw_json())

    def _body(self, limit: int) -> Iterator[bytes]:
        """The request body in pieces; 413 `payload_too_large` past `limit` bytes."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            yield from self._chunked_body(limit)
            return
        text = self.headers.get("Content-Length")
        if text is None:
            self._body_read = True
            return
        if not text.strip().isdigit():
            raise invalid("Content-Length must be a whole number")
        remaining = int(text)
        if remaining > limit:
            raise ApiError(413, "payload_too_large", f"the body may be at most {limit} bytes")
        while remaining:
            piece = self.rfile.read(min(remaining, READ_CHUNK))
            if not piece:
                raise ClientGone()
            remaining -= len(piece)
            yield piece
        self._body_read = True

    def _chunked_body(self, limit: int) -> Iterator[bytes]:
        total = 0
        while True:
            line = self.rfile.readline(1024)
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise invalid("a malformed chunk in the body") from None
            total += size
            if total > limit:
                raise ApiError(413, "payload_too_large", f"the body may be at most {limit} bytes")
            if size == 0:
                while self.rfile.readline(1024).strip():  # trailers
                    pass
                self._body_read = True
                return
            piece = self.rfile.read(size)
            if len(piece) < size:
                raise ClientGone()
            self.rfile.readline(8)  # the CRLF after the chunk
            yield piece

    # -- answers -----------------------------------------------------------------------------

    def _send_json(self, status: int, body: dict[str, Any], headers: dict | None = None) -> None:
        self._send_bytes(status, "application/json", json.dumps(body).encode(), headers)

    def _send_bytes(self, status: int, kind: str, data: bytes, headers: dict | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if not self._body_read:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self._headers_sent = True
        self._status = status
        self.wfile.write(data)

    def _send_error(self, error: ApiError) -> None:
        if self._headers_sent:  # mid-stream: all that is left is to hang up
            self.close_connection = True
            return
        headers = {}
        if error.status == 401:
            headers["WWW-Authenticate"] = "Bearer"
        if error.status == 405:
            headers["Allow"] = getattr(self, "_allow", "")
        if error.status in (401, 404, 405) and not self._body_read:
            self._discard_small_body()
        try:
            self._send_json(error.status, error.body(), headers)
        except OSError:
            self.close_connection = True

    def _discard_small_body(self) -> None:
        """Read a small unread body away so the connection can stay open."""
        text = self.headers.get("Content-Length", "")
        if "chunked" not in self.headers.get("Transfer-Encoding", "").lower() and (
            text.strip().isdigit() and int(text) <= JSON_LIMIT
        ):
            self.rfile.read(int(text))
            self._body_read = True

    def send_error(self, code: int, message: str | None = None, explain: str | None = None):
        """http.server's own errors (a malformed request line or headers), in our shape."""
        kinds = {404: "not_found", 405: "method_not_allowed", 501: "method_not_allowed"}
        body = json.dumps(
            error_body(kinds.get(code, "invalid_request"), message or "bad request")
        ).encode()
        self.close_connection = True
        self.send_response(code, message)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self._headers_sent = True
        self._status = 200

    def _send_event(self, data: dict[str, Any]) -> None:
        self._write_chunk(b"data: " + json.dumps(data).encode() + b"\n\n")

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def _end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")


def _json_object(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw, parse_constant=_no_constant)
    except ValueError:
        raise invalid("the body is not valid JSON") from None
    if not isinstance(body, dict):
        raise invalid("the body must be a JSON object")
    return body


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _event_error(event: Any) -> ApiError:
    if isinstance(event, Failed):
        return ApiError(500, "internal_error", event.message)
    if isinstance(event, Aborted):
        return ApiError(503, "shutting_down", event.message)
    return ApiError(500, "internal_error", f"unexpected event {event!r}")
