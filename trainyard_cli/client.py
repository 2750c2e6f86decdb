"""A thin client of the Trainyard API: one place that sends the key, reads the API's error
shape (`{"error": {"type", "message", "param"}}`) and turns failures into two exceptions the
entry point maps to exit codes: `ApiError` (the server said no) and `ConnectionProblem` (we
could not get an answer, or the server broke)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx

from trainyard_cli import __version__
from trainyard_cli.config import Settings

TIMEOUT = httpx.Timeout(60.0, connect=10.0)
# POSTs that carry an Idempotency-Key are safe to send again after a dropped connection.
IDEMPOTENT_RETRIES = 3
RETRY_DELAY_S = 0.5


class CliError(Exception):
    """Something the CLI reports as one line on stderr and a non-zero exit code."""

    exit_code = 1

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class UsageError(CliError):
    """The command line itself is wrong (as argparse's own errors: exit 2)."""

    exit_code = 2


class ApiError(CliError):
    """The API answered with an error. A 4xx is the caller's to fix (exit 2); a 5xx is the
    server's (exit 3, like a connection problem: trying again later may work)."""

    def __init__(
        self, status: int, message: str, *, error_type: str = "", param: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.error_type = error_type
        self.param = param
        self.exit_code = 3 if status >= 500 else 2


class ConnectionProblem(CliError):
    """No answer from the server (refused, timed out, cut off, or a corrupted transfer)."""

    exit_code = 3


def error_from_response(response: httpx.Response) -> ApiError:
    """The API's own message where the body has the error shape, else the status line (a
    proxy's HTML page is no message for a terminal)."""
    try:
        error = response.json().get("error")
    except (ValueError, AttributeError):
        error = None
    if isinstance(error, dict) and error.get("message"):
        return ApiError(
            response.status_code,
            str(error["message"]),
            error_type=str(error.get("type") or ""),
            param=error.get("param"),
        )
    reason = response.reason_phrase or "error"
    return ApiError(response.status_code, f"HTTP {response.status_code} {reason}")


class Client:
    def __init__(self, settings: Settings, *, transport: httpx.BaseTransport | None = None):
        self.settings = settings
        self.http = httpx.Client(
            base_url=settings.url,
            headers={
                "Authorization": f"Bearer {settings.api_key}",
                "Accept": "application/json",
                "User-Agent": f"trainyard-cli/{__version__}",
            },
            timeout=TIMEOUT,
            transport=transport,
            follow_redirects=False,
        )

    def close(self) -> None:
        self.http.close()

    def request(self, method: str, path: str, *, retries: int = 0, **kwargs: Any) -> httpx.Response:
        """Send one request; the response when it is a 2xx, else ApiError/ConnectionProblem.
        `retries` re-sends after a transport failure (only for requests safe to repeat)."""
        for attempt in range(retries + 1):
            try:
                response = self.http.request(method, path, **kwargs)
                break
            except httpx.TransportError as exc:
                if attempt == retries:
                    raise ConnectionProblem(self._unreachable(exc)) from exc
                time.sleep(RETRY_DELAY_S * 2**attempt)
        if response.is_success:
            return response
        raise error_from_response(response)

    def get_json(self, path: str, params: dict | None = None) -> Any:
        return self._json(self.request("GET", path, params=_clean(params), retries=2))

    def post_json(
        self,
        path: str,
        body: dict | None = None,
        *,
        params: dict | None = None,
        idempotency_key: str | None = None,
    ) -> Any:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        response = self.request(
            "POST",
            path,
            json=body,
            params=_clean(params),
            headers=headers,
            retries=IDEMPOTENT_RETRIES if idempotency_key else 0,
        )
        return self._json(response)

    def post_stream(
        self,
        path: str,
        chunks: Iterator[bytes],
        *,
        size: int,
        content_type: str,
        params: dict | None = None,
    ) -> Any:
        """POST a body of `size` bytes from an iterator (for a progress bar). The length goes
        in Content-Length so no chunked encoding is needed."""
        headers = {"Content-Type": content_type, "Content-Length": str(size)}
        return self._json(
            self.request("POST", path, content=chunks, headers=headers, params=_clean(params))
        )

    def stream(self, method: str, path: str, **kwargs: Any):
        """A streamed response (a context manager); errors are raised as by `request`."""
        return _Streamed(self, method, path, kwargs)

    def pages(self, path: str, params: dict | None = None) -> Iterator[dict]:
        """Every page of a `{data, next_cursor, total}` list, following the cursors."""
        query = dict(params or {})
        while True:
            page = self.get_json(path, query)
            yield page
            if not page.get("next_cursor"):
                return
            query["cursor"] = page["next_cursor"]

    def _json(self, response: httpx.Response) -> Any:
        if not response.content:
            return None
        try:
            return response.json()
        except ValueError as exc:
            raise ConnectionProblem(
                f"{response.request.url.path} answered something that is not JSON."
            ) from exc

    def _unreachable(self, exc: httpx.TransportError) -> str:
        detail = str(exc) or type(exc).__name__
        return f"Cannot reach {self.settings.url}: {detail}"


class _Streamed:
    def __init__(self, client: Client, method: str, path: str, kwargs: dict) -> None:
        self.client, self.method, self.path, self.kwargs = client, method, path, kwargs
        self._context = None

    def __enter__(self) -> httpx.Response:
        try:
            self._context = self.client.http.stream(self.method, self.path, **self.kwargs)
            response = self._context.__enter__()
        except httpx.TransportError as exc:
            raise ConnectionProblem(self.client._unreachable(exc)) from exc
        if not response.is_success:
            response.read()
            error = error_from_response(response)
            self._context.__exit__(None, None, None)
            raise error
        return response

    def __exit__(self, *exc_info) -> None:
        if self._context is not None:
            self._context.__exit__(*exc_info)


def _clean(params: dict | None) -> dict | None:
    """Query parameters without the unset ones."""
    if params is None:
        return None
    return {k: v for k, v in params.items() if v is not None and v != ""}


def dumps(data: Any) -> str:
    return json.dumps(data, indent=2, sort_keys=False)
