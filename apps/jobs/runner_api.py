"""`/api/v1/runner/jobs/<job id>/...`: the endpoints the runner calls (docs/runner-protocol.md).

Authenticated by the attempt's runner token only — no sessions, so no CSRF. A token of
another job is a 404. These are plain Django views: they are the hottest path (log batches)
and need none of DRF's negotiation.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import suppress
from functools import wraps

from django.conf import settings
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from apps.accounts.api_errors import error_body
from apps.accounts.errors import ApiError, InvalidRequest
from apps.jobs import artifacts, ingestion, job_inputs, supervision
from apps.jobs.models import Attempt
from apps.jobs.supervision import AttemptSuperseded
from apps.jobs.tokens import nonce_from
from apps.secrets.selectors import resolve_secret_env


def _error(status: int, error_type: str, message: str, param: str | None = None) -> JsonResponse:
    return JsonResponse(error_body(error_type, message, param), status=status)


def runner_endpoint(view: Callable) -> Callable:
    """Authenticate the runner token, match it to the job in the path, and turn our
    exceptions into the protocol's answers."""

    @csrf_exempt
    @wraps(view)
    def wrapped(request: HttpRequest, job_id: str) -> JsonResponse:
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
            return view(request, attempt)
        except AttemptSuperseded:
            return _error(409, "attempt_superseded", "This attempt is no longer the job's.")
        except ApiError as exc:  # 400 invalid_request, sha256_mismatch, 413 ...
            return _error(exc.status_code, exc.error_type, str(exc.detail), exc.param)

    return wrapped


def _json_body(request: HttpRequest) -> object:
    try:
        return json.loads(request.body or b"{}")
    except ValueError as exc:
        raise InvalidRequest("The body is not valid JSON.") from exc


@require_GET
@runner_endpoint
def spec(request: HttpRequest, attempt: Attempt) -> JsonResponse:
    job = attempt.job
    if attempt.ended_at is not None or attempt.number != job.attempt_count:
        raise AttemptSuperseded(attempt.pk)
    container = job.spec["container"]
    secret_values = resolve_secret_env(
        organization=job.organization, secret_env=container.get("secret_env") or {}
    )
    inputs, env_for_runner = job_inputs.runner_inputs(job)
    env = {**container.get("env", {}), **env_for_runner, **secret_values}
    env.update(
        {
            "TRAINYARD_JOB_ID": job.public_id,
            "TRAINYARD_ATTEMPT": str(attempt.number),
            "TRAINYARD_CHECKPOINT_DIR": "checkpoints",
            "TRAINYARD_RESUME_FROM": "",
        }
    )
    if settings.TRAINYARD_HF_ENDPOINT:
        env["HF_ENDPOINT"] = settings.TRAINYARD_HF_ENDPOINT
    return JsonResponse(
        {
            "job_id": job.public_id,
            "attempt": attempt.number,
            "command": container.get("command"),
            "script_b64": container.get("script_b64"),
            "env": env,
            "mask": [value for value in secret_values.values() if value],
            "heartbeat_interval_s": settings.HEARTBEAT_INTERVAL_S,
            "log_batch_max_lines": settings.LOG_BATCH_MAX_LINES,
            "log_batch_max_interval_s": settings.LOG_BATCH_MAX_INTERVAL_S,
            "terminate_grace_s": settings.TERMINATE_GRACE_S,
            "final_flush_timeout_s": 600,
            "resume_from": artifacts.resume_from(job),
            "inputs": inputs,
        }
    )


@require_POST
@runner_endpoint
def started(request: HttpRequest, attempt: Attempt) -> JsonResponse:
    body = _json_body(request)
    step = body.get("resumed_from_step") if isinstance(body, dict) else None
    if step is not None and (not isinstance(step, int) or isinstance(step, bool) or step < 0):
        raise InvalidRequest(
            "resumed_from_step must be a non-negative whole number.", param="resumed_from_step"
        )
    return JsonResponse({"order": supervision.runner_started(attempt.pk, step)})


@require_POST
@runner_endpoint
def heartbeat(request: HttpRequest, attempt: Attempt) -> JsonResponse:
    return JsonResponse({"order": supervision.runner_heartbeat(attempt.pk)})


@require_POST
@runner_endpoint
def logs(request: HttpRequest, attempt: Attempt) -> JsonResponse:
    lines = ingestion.parse_batch(_json_body(request))
    result = ingestion.ingest(attempt=attempt, job=attempt.job, lines=lines)
    return JsonResponse({"accepted": result.accepted, "duplicates": result.duplicates})


@require_POST
@runner_endpoint
def exit_(request: HttpRequest, attempt: Attempt) -> JsonResponse:
    body = _json_body(request)
    code = body.get("exit_code") if isinstance(body, dict) else None
    if not isinstance(code, int) or isinstance(code, bool):
        raise InvalidRequest("exit_code must be a whole number.", param="exit_code")
    # A late report of an old attempt has nothing left to do, and nothing to undo.
    if attempt.ended_at is None:
        with suppress(AttemptSuperseded):
            supervision.runner_exited(attempt.pk, code)
    return JsonResponse({"ok": True})
