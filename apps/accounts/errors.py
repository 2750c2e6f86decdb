"""Our own API errors: an HTTP status and a stable `error_type` a client can branch on.
Rendered by `apps.accounts.api_errors.exception_handler`."""

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
    default_detail = "Compute is not enabled for this organization."


class Conflict(ApiError):
    status_code = status.HTTP_409_CONFLICT
    error_type = "conflict"
    default_detail = "The request conflicts with the current state."


class PayloadTooLarge(ApiError):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    error_type = "payload_too_large"
    default_detail = "The request body is larger than this server accepts."
