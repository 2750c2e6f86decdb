"""The errors our code raises, shared by every app.

- `ApiError` and its family: a request that cannot be served as asked, with an HTTP status
  and a stable `error_type` a client can branch on. Services raise them; one handler
  (`apps.core.api_errors.exception_handler`) renders them as the API's error shape, and the
  runner endpoints and forms read the same attributes.
- `Retryable`: a transient failure (a provider away, a lock taken); the house task decorator
  (`apps.core.tasks.trainyard_task`) retries any task that raises it.
"""

from __future__ import annotations

from rest_framework import exceptions, status


class ApiError(exceptions.APIException):
    """Base for our own API errors: a status code and a stable `error_type`."""

    status_code = status.HTTP_400_BAD_REQUEST
    error_type = "invalid_request"
    default_detail = "The request is not valid."

    def __init__(self, detail: str | None = None, param: str | None = None) -> None:
        super().__init__(detail)
        self.param = param


class InvalidRequest(ApiError):
    pass


class TenantDisabled(ApiError):
    status_code = status.HTTP_403_FORBIDDEN
    error_type = "tenant_disabled"
    default_detail = "Compute is not enabled for this organization yet."


class NotFound(ApiError):
    """The object is not there for this caller (another organization's object is not there
    either: never a 403)."""

    status_code = status.HTTP_404_NOT_FOUND
    error_type = "not_found"
    default_detail = "Not found."


class Conflict(ApiError):
    status_code = status.HTTP_409_CONFLICT
    error_type = "conflict"
    default_detail = "The request conflicts with the current state."


class PayloadTooLarge(ApiError):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    error_type = "payload_too_large"
    default_detail = "The request body is larger than this server accepts."


class UnsupportedEncoding(ApiError):
    status_code = status.HTTP_415_UNSUPPORTED_MEDIA_TYPE
    error_type = "unsupported_media_type"
    default_detail = "The request body's Content-Encoding is not one this server reads."


class Retryable(Exception):
    """A transient failure: the same call may succeed later, so a task retries it."""
