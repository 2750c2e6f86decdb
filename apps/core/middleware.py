"""JSON errors everywhere under `/api/` and `/v1/`, in every mode.

Django answers some errors before or around our views with its own HTML: a URL nothing
matches (with DEBUG on, the technical 404 page; `handler404` covers only DEBUG off), a
method a plain view refuses, a CSRF failure, the technical 500 page. A client of the API
must get the API's error shape whatever went wrong, so this middleware (outermost, so it
sees every response) turns any error response under those prefixes that is not already JSON
into `{"error": {"type", "message", "param"}}` with the same status, keeping the headers a
client needs (`Allow`, `Retry-After`, `WWW-Authenticate`).

A request that found every pooled database connection taken for the pool's whole wait is
not a bug to answer 500 for: under `/api/` it is a 503 `overloaded` with `Retry-After`, which
clients retry.
"""

from __future__ import annotations

from collections.abc import Callable

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.db import OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse

from apps.core.api_errors import error_body, is_api_path

_ANSWERS: dict[int, tuple[str, str]] = {
    400: ("invalid_request", "The request is not valid."),
    401: ("unauthenticated", "Authentication is required."),
    403: ("permission_denied", "You may not do this."),
    404: ("not_found", "Not found."),
    405: ("method_not_allowed", "This method is not allowed here."),
    413: ("payload_too_large", "The request body is larger than this server accepts."),
    429: ("rate_limited", "Too many requests; try again later."),
}
_KEPT_HEADERS = ("Allow", "Retry-After", "WWW-Authenticate")
OVERLOADED_RETRY_AFTER_S = 1


class ApiJsonErrorsMiddleware:
    """Usable sync or async, so it never makes Django cross between the event loop and the
    request's thread on its account (`SyncChainMiddleware` decides the chain's mode)."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if self.is_async:
            return self._acall(request)
        return _as_json_error(request, self.get_response(request))

    async def _acall(self, request: HttpRequest) -> HttpResponse:
        return _as_json_error(request, await self.get_response(request))

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not is_api_path(request.path) or not pool_exhausted(exception):
            return None
        answer = JsonResponse(
            error_body("overloaded", "The server is busy: no database connection was free."),
            status=503,
        )
        answer["Retry-After"] = str(OVERLOADED_RETRY_AFTER_S)
        return answer


def _as_json_error(request: HttpRequest, response: HttpResponse) -> HttpResponse:
    if (
        response.status_code < 400
        or not is_api_path(request.path)
        or response.get("Content-Type", "").startswith("application/json")
    ):
        return response
    return json_error(response)


def pool_exhausted(exception: BaseException) -> bool:
    """Whether `exception` is the connection pool's wait running out (every connection
    taken), as Django raises it: an OperationalError caused by psycopg_pool's PoolTimeout."""
    try:
        from psycopg_pool import PoolTimeout
    except ImportError:  # no pool without psycopg_pool
        return False
    return isinstance(exception, OperationalError) and isinstance(exception.__cause__, PoolTimeout)


def json_error(response: HttpResponse) -> JsonResponse:
    status = response.status_code
    if status >= 500:
        error_type, message = "internal_error", "Something went wrong on our side."
    else:
        error_type, message = _ANSWERS.get(status, ("invalid_request", "The request failed."))
    answer = JsonResponse(error_body(error_type, message), status=status)
    for name in _KEPT_HEADERS:
        if response.has_header(name):
            answer[name] = response[name]
    return answer


class SyncChainMiddleware:
    """Innermost and sync only, so that Django runs every middleware above it in sync mode
    under ASGI: the request crosses to its thread once at the top and stays there, instead
    of each `MiddlewareMixin` crossing to the thread and back for its request and response
    hooks (Django's async mode runs those through `sync_to_async`, one crossing each)."""

    sync_capable = True
    async_capable = False

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)
