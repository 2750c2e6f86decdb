"""Authentication of the runner endpoints (docs/runner-protocol.md): a per-attempt Bearer
token, matched to the job in the path, and the protocol version the runner speaks.

Authenticated by the attempt's runner token only — no sessions, so no CSRF. A token of
another job is a 404. A token lives as long as its attempt, plus `TOKEN_GRACE_AFTER_END_S`
for the runner's final flush (its last lines, uploads and `exit`): past that every endpoint
answers 401 `unauthenticated`, so a workload that outlives its attempt (or kept a copy of
the token) can no longer write to the job. These are plain Django views: they are the
hottest path (log batches) and need none of DRF's negotiation.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timedelta
from functools import wraps

import orjson
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, JsonResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt

from apps.core.api_errors import body_too_large, error_body, nested_too_deep
from apps.core.content_encoding import decoded_body
from apps.core.errors import ApiError, InvalidRequest
from apps.jobs.execution.attempts import AttemptSuperseded
from apps.jobs.execution.tokens import nonce_from
from apps.jobs.models import Attempt
from runner import protocol

# How long a runner token still works once its attempt has ended: the runner's final flush
# (last log lines, pending uploads, the exit report) happens right after the end. A setting
# of the same name overrides it.
TOKEN_GRACE_AFTER_END_S = 120


def _error(status: int, error_type: str, message: str, param: str | None = None) -> JsonResponse:
    return JsonResponse(error_body(error_type, message, param), status=status)


def not_found(message: str = "Not found.") -> JsonResponse:
    return _error(404, "not_found", message)


def token_expired(attempt: Attempt, now: datetime | None = None) -> bool:
    """True when the attempt ended (or its job did) more than the grace period ago: its
    token no longer opens any runner endpoint."""
    ended = attempt.ended_at
    if ended is None and attempt.job.is_terminal:
        ended = attempt.job.terminal_at  # attempts end first; this is a second lock
    if ended is None:
        return False
    grace = getattr(settings, "TOKEN_GRACE_AFTER_END_S", TOKEN_GRACE_AFTER_END_S)
    return (now or timezone.now()) - ended > timedelta(seconds=grace)


def runner_endpoint(view: Callable) -> Callable:
    """Check the protocol version, authenticate the runner token, match it to the job in the
    path, and turn our exceptions into the protocol's answers. The view gets the attempt and
    the route's other arguments."""

    @csrf_exempt
    @wraps(view)
    def wrapped(request: HttpRequest, job_id: str, **route: object) -> JsonResponse:
        refusal = protocol_refusal(request)
        if refusal is not None:
            return refusal
        header = request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        nonce = nonce_from(token.strip()) if scheme.lower() == "bearer" else None
        if nonce is None:
            return _error(401, "unauthenticated", "A valid runner token is required.")
        attempt = attempts_by_nonce([nonce]).get(nonce)
        refused = attempt_refusal(attempt, job_id)
        if refused is not None:
            return _error(*refused)
        try:
            return view(request, attempt, **route)
        except (AttemptSuperseded, ApiError) as exc:
            return _error(*refusal_of(exc))

    return wrapped


def protocol_refusal(request: HttpRequest) -> JsonResponse | None:
    """The 400 `unsupported_protocol` answer when the request's protocol version header names
    a version this control plane does not speak; None when it is fine. A runner that sends
    no version header is one started by an older control plane: it speaks version 1."""
    version = protocol.version_of_header(request.headers.get(protocol.PROTOCOL_HEADER))
    if version is not None and protocol.supported(version):
        return None
    return _error(
        400,
        protocol.ERROR_UNSUPPORTED_PROTOCOL,
        f"This control plane speaks runner protocol versions 1 to "
        f"{protocol.PROTOCOL_VERSION}; the runner sent "
        f"{request.headers.get(protocol.PROTOCOL_HEADER)!r}.",
    )


def attempts_by_nonce(nonces: list[str]) -> dict[str, Attempt]:
    """The attempts whose runner tokens carry these nonces, each with its job and project,
    in one query.

    The nonce is unique, so no ORDER BY: the model's ordering (job, then the job's own
    ordering) costs as much to compile as the query costs to run, on the hottest path there
    is. Only what log batches and heartbeats use is joined (the job, and its project for
    live pushes): compiling and reading the organization's and the provider's columns too
    would cost every request more. The rarer calls (spec, started, exit, uploads) load
    those when they need them."""
    if not nonces:
        return {}
    found = Attempt.objects.select_related("job__project").order_by()
    if len(nonces) == 1:
        found = found.filter(token_nonce=nonces[0])[:1]
    else:
        found = found.filter(token_nonce__in=set(nonces))
    return {attempt.token_nonce: attempt for attempt in found}


def attempt_refusal(attempt: Attempt | None, job_id: str) -> tuple[int, str, str] | None:
    """(status, error type, message) when a token's attempt may not act on the job
    `job_id`: 404 when there is no such attempt or it belongs to another job, 401 when its
    attempt ended more than the grace period ago. None when it may."""
    if attempt is not None and token_expired(attempt):
        return 401, "unauthenticated", "The attempt of this runner token has ended."
    if attempt is None or attempt.job.public_id != job_id:
        return 404, "not_found", "Not found."
    return None


def refusal_of(exc: AttemptSuperseded | ApiError) -> tuple:
    """(status, error type, message, param) of the answer to a runner call that raised."""
    if isinstance(exc, AttemptSuperseded):
        return 409, protocol.ERROR_ATTEMPT_SUPERSEDED, "This attempt is no longer the job's."
    return exc.status_code, exc.error_type, str(exc.detail), exc.param  # 400, 413, ...


def json_body(request: HttpRequest) -> object:
    """The request's JSON body. A body over DATA_UPLOAD_MAX_MEMORY_SIZE is a 413
    `payload_too_large`, one that is not JSON or is nested too deeply to read a 400.
    A body sent with `Content-Encoding: gzip` (a runner's bigger log batches) is unpacked
    first, to at most DATA_UPLOAD_MAX_MEMORY_SIZE (`apps.core.content_encoding`).

    orjson reads it first (a log batch is the hottest body there is, and orjson reads it
    several times faster); whatever orjson refuses (a lone surrogate escape, an integer past
    64 bits, NaN, deep nesting, UTF-16) is then read by the standard library, so the
    answer to any body is the one `json` gives."""
    try:
        raw = request.body or b"{}"
    except RequestDataTooBig as exc:
        raise body_too_large() from exc
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE or settings.REQUEST_MAX_BYTES
    raw = decoded_body(raw, request.headers.get("Content-Encoding"), limit)
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        pass
    try:
        return json.loads(raw)
    except RecursionError as exc:
        raise nested_too_deep() from exc
    except ValueError as exc:
        raise InvalidRequest("The body is not valid JSON.") from exc
