"""The one error shape every answer uses: `{"error": {"type", "message", "param", "code"}}`.

`type` is stable and is what callers branch on (the control plane's `engine_client` reads it);
`message` is for people; `param` names the request field at fault, or is null.
"""

from __future__ import annotations

from typing import Any


def error_body(
    error_type: str, message: str, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    return {"error": {"type": error_type, "message": message, "param": param, "code": code}}


class ApiError(Exception):
    """An answer other than success; raised anywhere under a handler, sent as its body."""

    def __init__(
        self, status: int, error_type: str, message: str, param: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.error_type = error_type
        self.message = message
        self.param = param

    def body(self) -> dict[str, Any]:
        return error_body(self.error_type, self.message, self.param)


def invalid(message: str, param: str | None = None) -> ApiError:
    """400 `invalid_request`."""
    return ApiError(400, "invalid_request", message, param)


def model_not_found(name: object) -> ApiError:
    return ApiError(404, "model_not_found", f"the model {name!r} does not exist", "model")
