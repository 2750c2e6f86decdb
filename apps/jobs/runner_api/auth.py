"""Authentication of the runner endpoints (docs/runner-protocol.md): a per-attempt Bearer
token, matched to the job in the path, and the protocol version the runner speaks.

Authenticated by the attempt's runner token only — no sessions, so no CSRF. A token of
another job is a 404. These are plain Django views: they are the hottest path (log batches)
and need none of DRF's negotiation.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import wraps

from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from apps.core.api_errors import error_body
from apps.core.errors import ApiError, InvalidRequest
from apps.jobs.execution.attempts import AttemptSuperseded
from apps.jobs.execution.tokens import nonce_from
from apps.jobs.models import Attempt
from runner import protocol


def _error(status: int, error_type: str, message: str, param: str | None = None) -> JsonResponse:
    return JsonResponse(error_body(error_type, message, param), status=status)


def not_found(message: str = "Not found.") -> JsonResponse:
    return _error(404, "not_found", message)


def runner_endpoint(view: Callable) -> Callable:
    """Check the protocol version, authenticate the runner token, match it to the job in the
    path, and turn our exceptions into the protocol's answers. The view gets the attempt and
    the route's other arguments. A runner that sends no version header is one started by an
    older control plane: it speaks version 1."""

    @csrf_exempt
    @wraps(view)
    def wrapped(request: HttpRequest, job_id: str, **route: object) -> JsonResponse:
        version = protocol.version_of_header(request.headers.get(protocol.PROTOCOL_HEADER))
        if version is None or not protocol.supported(version):
            return _error(
                400,
                protocol.ERROR_UNSUPPORTED_PROTOCOL,
                f"This control plane speaks runner protocol versions 1 to "
                f"{protocol.PROTOCOL_VERSION}; the runner sent "
                f"{request.headers.get(protocol.PROTOCOL_HEADER)!r}.",
            )
        header = request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        nonce = nonce_from(token.strip()) if scheme.lower() == "bearer" else None
        if nonce is None:
            return _error(401, "unauthenticated", "A valid runner token is required.")
        attempt = (
            Attempt.objects.select_related("job__organization", "job__project", "provider")
            .filter(token_nonce=nonce)
            .first()
        )
        if attempt is None or attempt.job.public_id != job_id:
            return _error(404, "not_found", "Not found.")
        try:
            return view(request, attempt, **route)
        except AttemptSuperseded:
            return _error(
                409, protocol.ERROR_ATTEMPT_SUPERSEDED, "This attempt is no longer the job's."
            )
        except ApiError as exc:  # 400 invalid_request, sha256_mismatch, 413 ...
            return _error(exc.status_code, exc.error_type, str(exc.detail), exc.param)

    return wrapped


def _json_body(request: HttpRequest) -> object:
    try:
        return json.loads(request.body or b"{}")
    except ValueError as exc:
        raise InvalidRequest("The body is not valid JSON.") from exc


def json_body(request: HttpRequest) -> object:
    try:
        return json.loads(request.body or b"{}")
    except ValueError as exc:
        raise InvalidRequest("The body is not valid JSON.") from exc
