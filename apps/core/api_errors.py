"""One error shape for the whole API: `{"error": {"type", "message", "param"}}`.

Types are stable strings a client can branch on; messages are for people and may change.

Input the server cannot take is the client's error, in this shape too: a body over
DATA_UPLOAD_MAX_MEMORY_SIZE is a 413 `payload_too_large` (Django's own answer would be its
HTML 400 page), and input nested too deeply to read or handle (`RecursionError`) a 400
`invalid_request`.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.views.defaults import bad_request, page_not_found, server_error
from rest_framework import exceptions
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from apps.core.errors import ApiError, InvalidRequest, PayloadTooLarge

logger = logging.getLogger(__name__)

_TYPES_BY_CLASS: list[tuple[type[Exception], str]] = [
    (exceptions.NotAuthenticated, "unauthenticated"),
    (exceptions.AuthenticationFailed, "unauthenticated"),
    (exceptions.PermissionDenied, "permission_denied"),
    (exceptions.NotFound, "not_found"),
    (exceptions.MethodNotAllowed, "method_not_allowed"),
    (exceptions.NotAcceptable, "not_acceptable"),
    (exceptions.UnsupportedMediaType, "unsupported_media_type"),
    (exceptions.Throttled, "rate_limited"),
    (exceptions.ParseError, "invalid_request"),
    (exceptions.ValidationError, "invalid_request"),
]


def error_body(error_type: str, message: str, param: str | None = None) -> dict:
    return {"error": {"type": error_type, "message": message, "param": param}}


def first_validation_error(detail, path: str = "") -> tuple[str | None, str]:
    """The first (param, message) in a nested DRF validation error, with a dotted param."""
    if isinstance(detail, dict):
        for key, value in detail.items():
            nested = f"{path}.{key}" if path else str(key)
            if key == "non_field_errors":
                nested = path
            param, message = first_validation_error(value, nested)
            return param or None, message
    if isinstance(detail, list) and detail:
        for index, item in enumerate(detail):
            if isinstance(item, dict | list):
                return first_validation_error(item, f"{path}[{index}]" if path else "")
            return path or None, str(item)
    return path or None, str(detail)


def body_too_large() -> PayloadTooLarge:
    """What a request body over DATA_UPLOAD_MAX_MEMORY_SIZE is answered with."""
    return PayloadTooLarge(
        f"The request body is larger than the {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes "
        "this server accepts."
    )


def nested_too_deep() -> InvalidRequest:
    """What input nested too deeply to read or handle is answered with."""
    return InvalidRequest("The request is nested too deeply.")


def client_error_for(exc: BaseException) -> ApiError | None:
    """Our error for an exception that is the request's fault though not one of ours."""
    if isinstance(exc, RequestDataTooBig):
        return body_too_large()
    if isinstance(exc, RecursionError):
        # Only input nests this deep here; logged all the same, in case it is a bug.
        logger.warning("a request nested too deeply", exc_info=exc)
        return nested_too_deep()
    return None


def exception_handler(exc, context):
    if isinstance(exc, Http404):
        exc = exceptions.NotFound("Not found.")
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    else:
        exc = client_error_for(exc) or exc
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, ApiError):
        body = error_body(exc.error_type, str(exc.detail), exc.param)
    elif isinstance(exc, exceptions.ValidationError):
        param, message = first_validation_error(exc.detail)
        body = error_body("invalid_request", message, param)
    else:
        error_type = next(
            (name for cls, name in _TYPES_BY_CLASS if isinstance(exc, cls)), "api_error"
        )
        body = error_body(error_type, str(getattr(exc, "detail", exc)))
    return Response(body, status=response.status_code, headers=_kept_headers(response))


def _kept_headers(response: Response) -> dict[str, str]:
    return {
        name: response[name]
        for name in ("WWW-Authenticate", "Allow", "Retry-After")
        if response.has_header(name)
    }


API_PREFIXES = ("/api/", "/v1/")


def is_api_path(path: str) -> bool:
    """Whether `path` is the API's (ours under /api/, the OpenAI-compatible one under /v1/)."""
    return path.startswith(API_PREFIXES)


def _is_api(request: HttpRequest) -> bool:
    return is_api_path(request.path)


def handler400(request: HttpRequest, exception: Exception) -> HttpResponse:
    """Django's answer to a SuspiciousOperation raised outside a DRF view (e.g. a body over
    DATA_UPLOAD_MAX_MEMORY_SIZE read by a plain view): the error shape under /api/."""
    if _is_api(request):
        error = client_error_for(exception)
        if error is not None:
            return JsonResponse(
                error_body(error.error_type, str(error.detail), error.param),
                status=error.status_code,
            )
        message = "The request is not valid."
        if isinstance(exception, SuspiciousOperation):
            message = f"The request was refused: {type(exception).__name__}."
        return JsonResponse(error_body("invalid_request", message), status=400)
    return bad_request(request, exception)


def handler404(request: HttpRequest, exception: Exception) -> HttpResponse:
    if _is_api(request):
        return JsonResponse(error_body("not_found", "Not found."), status=404)
    return page_not_found(request, exception)


def handler500(request: HttpRequest) -> HttpResponse:
    if _is_api(request):
        return JsonResponse(
            error_body("internal_error", "Something went wrong on our side."), status=500
        )
    return server_error(request)
