"""JSON errors everywhere under `/api/` and `/v1/`, in every mode.

Django answers some errors before or around our views with its own HTML: a URL nothing
matches (with DEBUG on, the technical 404 page; `handler404` covers only DEBUG off), a
method a plain view refuses, a CSRF failure, the technical 500 page. A client of the API
must get the API's error shape whatever went wrong, so this middleware (outermost, so it
sees every response) turns any error response under those prefixes that is not already JSON
into `{"error": {"type", "message", "param"}}` with the same status, keeping the headers a
client needs (`Allow`, `Retry-After`, `WWW-Authenticate`).
"""

from __future__ import annotations

from collections.abc import Callable

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


class ApiJsonErrorsMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if (
            response.status_code < 400
            or not is_api_path(request.path)
            or response.get("Content-Type", "").startswith("application/json")
        ):
            return response
        return json_error(response)


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
