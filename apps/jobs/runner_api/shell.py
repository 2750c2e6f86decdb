"""The runner's calls that carry sessions into its job (runner.protocol, "shell sessions"):
`accept` lists the sessions waiting for the attempt, `down` hands the runner what the client
sent, `up` takes what the workload answered. Async views: a long-poll waits on Redis in the
event loop, holding no thread and no database connection (admission control does not gate
these paths; `config/admission.py`).

`accept` checks the token against the database, as every runner call does. `down` and `up`,
the per-keystroke calls, check the token's signature and that its nonce is the one the
session was opened for (kept with the session), without the database; a session that is
gone, or another attempt's, is a 404 `session_not_found`."""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from apps.core.api_errors import error_body
from apps.jobs.execution.tokens import nonce_from
from apps.jobs.runner_api.auth import attempt_refusal, attempts_by_nonce, protocol_refusal
from apps.jobs.shell import pipes
from runner import protocol

FRAMES_TYPE = "application/octet-stream"


def _error(status: int, error_type: str, message: str) -> JsonResponse:
    return JsonResponse(error_body(error_type, message, None), status=status)


def _nonce(request: HttpRequest) -> str | None:
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    return nonce_from(token.strip()) if scheme.lower() == "bearer" else None


def _wait_of(request: HttpRequest) -> float:
    try:
        wait = float(request.GET.get("wait", "0"))
    except ValueError:
        return 0.0
    return min(max(wait, 0.0), protocol.SHELL_WAIT_MAX_S) if wait == wait else 0.0


def _checked_nonce(request: HttpRequest) -> str | JsonResponse:
    """The runner token's nonce (its signature checked), or the answer refusing the call."""
    refusal = protocol_refusal(request)
    if refusal is not None:
        return refusal
    nonce = _nonce(request)
    if nonce is None:
        return _error(401, "unauthenticated", "A valid runner token is required.")
    return nonce


def _live_attempt(request: HttpRequest, job_id: str) -> int | JsonResponse:
    nonce = _checked_nonce(request)
    if isinstance(nonce, JsonResponse):
        return nonce
    attempt = attempts_by_nonce([nonce]).get(nonce)
    refused = attempt_refusal(attempt, job_id)
    if refused is not None:
        return _error(*refused)
    if attempt.ended_at is not None:
        return _error(409, protocol.ERROR_ATTEMPT_SUPERSEDED, "This attempt has ended.")
    return attempt.pk


@csrf_exempt
@require_GET
async def accept(request: HttpRequest, job_id: str) -> JsonResponse:
    found = await sync_to_async(_live_attempt)(request, job_id)
    if isinstance(found, JsonResponse):
        return found
    sessions = await pipes.take_requests(found, _wait_of(request))
    return JsonResponse({"sessions": sessions})


async def _session_refusal(request: HttpRequest, job_id: str, sid: str) -> JsonResponse | None:
    nonce = _checked_nonce(request)
    if isinstance(nonce, JsonResponse):
        return nonce
    meta = await pipes.meta_of(sid) if len(sid) <= 64 else None
    if meta is None or meta.nonce != nonce or meta.job_id != job_id:
        return _error(404, protocol.ERROR_SESSION_NOT_FOUND, "No such session.")
    return None


@csrf_exempt
@require_GET
async def down(request: HttpRequest, job_id: str, sid: str) -> HttpResponse:
    refused = await _session_refusal(request, job_id, sid)
    if refused is not None:
        return refused
    frames = await pipes.take(sid, "down", _wait_of(request))
    if not frames and await pipes.meta_of(sid) is None:
        return _error(404, protocol.ERROR_SESSION_NOT_FOUND, "The session is over.")
    return HttpResponse(frames, content_type=FRAMES_TYPE)


@csrf_exempt
@require_POST
async def up(request: HttpRequest, job_id: str, sid: str) -> JsonResponse:
    refused = await _session_refusal(request, job_id, sid)
    if refused is not None:
        return refused
    body = request.body
    try:
        frames = protocol.decode_frames(body)
    except ValueError as exc:
        return _error(400, "invalid_request", f"The frames could not be read: {exc}.")
    encoded = [protocol.encode_frame(kind, payload) for kind, payload in frames]
    return JsonResponse({"backlog": await pipes.push(sid, "up", encoded)})
