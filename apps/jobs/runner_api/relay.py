"""`POST relay`: the log batches and heartbeats of many attempts in one request, sent by a
relay (`python -m runner.relay`, docs/runner-protocol.md) that runners on one host talk to
instead of the control plane. One request of a hundred entries costs the web process about
what a few single requests do: its HTTP, middleware and one token query are shared, and
the batches are stored together (`ingestion.ingest_many`).

The bundle itself carries no credential: every entry carries its own runner token and is
authenticated, matched to its job and answered exactly as the same call alone at
`jobs/<job_id>/<call>` would be (status and body), so the relay hands each runner the answer
it would have had. One entry's refusal (a bad token, another job's id, a malformed batch, a
superseded attempt) is that entry's answer and never touches another's. An entry's
`follows` is not waited for: a relay sends one bundle at a time, in the order its runners
posted, so a batch's predecessor is stored before it or in the same bundle.

At `relay?calls=heartbeat` a bundle carries heartbeats only (the relay's heartbeat lane):
admission control (`config/admission.py`) lets it in as a heartbeat, not behind the log
batches, and an entry of another call there is that entry's 400.
"""

from __future__ import annotations

import logging

from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from apps.core.api_errors import error_body
from apps.core.errors import ApiError, InvalidRequest
from apps.jobs.execution import reports
from apps.jobs.execution.attempts import AttemptSuperseded
from apps.jobs.execution.tokens import nonce_from
from apps.jobs.models import Attempt
from apps.jobs.runner_api.auth import (
    attempt_refusal,
    attempts_by_nonce,
    json_body,
    protocol_refusal,
    refusal_of,
)
from apps.jobs.telemetry import ingestion
from runner import protocol

logger = logging.getLogger(__name__)

MAX_ENTRIES = protocol.RELAY_MAX_ENTRIES
CALLS = frozenset({protocol.RELAY_CALL_LOGS, protocol.RELAY_CALL_HEARTBEAT})
HEARTBEATS_ONLY = frozenset({protocol.RELAY_CALL_HEARTBEAT})
Result = dict  # {"status": int, "body": dict}


def _answer(status: int, body: dict) -> Result:
    return {"status": status, "body": body}


def _refused(status: int, error_type: str, message: str, param: str | None = None) -> Result:
    return _answer(status, error_body(error_type, message, param))


def _failed(exc: Exception) -> Result:
    """The answer of an entry whose call raised `exc`."""
    if isinstance(exc, AttemptSuperseded | ApiError):
        return _refused(*refusal_of(exc))
    logger.error("a relayed runner call failed", exc_info=exc)
    return _refused(500, "internal_error", "Something went wrong on our side.")


@csrf_exempt
@require_POST
def relay(request: HttpRequest) -> JsonResponse:
    refusal = protocol_refusal(request)
    if refusal is not None:
        return refusal
    try:
        calls = _calls(request)
        entries = _entries(json_body(request))
    except ApiError as exc:
        return JsonResponse(error_body(*refusal_of(exc)[1:]), status=exc.status_code)
    results: list[Result | None] = [None] * len(entries)
    nonces = {}
    for index, entry in enumerate(entries):
        problem = _malformed(entry, index, calls)
        if problem is not None:
            results[index] = problem
            continue
        nonce = nonce_from(entry["token"].strip())
        if nonce is None:
            results[index] = _refused(401, "unauthenticated", "A valid runner token is required.")
        else:
            nonces[index] = nonce
    attempts = attempts_by_nonce(list(set(nonces.values())))
    batches: dict[int, ingestion.Batch] = {}
    beats: dict[int, Attempt] = {}
    for index, nonce in nonces.items():
        entry = entries[index]
        attempt = attempts.get(nonce)
        refused = attempt_refusal(attempt, entry["job_id"])
        if refused is not None:
            results[index] = _refused(*refused)
        elif entry["call"] == protocol.RELAY_CALL_HEARTBEAT:
            beats[index] = attempt
        else:
            try:
                lines = ingestion.parse_batch(entry.get("body"))
                ingestion.parse_follows(entry["body"])
            except InvalidRequest as exc:
                results[index] = _failed(exc)
            else:
                batches[index] = ingestion.Batch(attempt, lines)
    _store_batches(batches, results)
    _record_beats(beats, results)
    return JsonResponse({"results": results})


def _calls(request: HttpRequest) -> frozenset[str]:
    """The calls this bundle may carry: both, or heartbeats only (`?calls=heartbeat`, the
    relay's heartbeat lane, which admission control lets in as a heartbeat)."""
    wanted = request.GET.get("calls")
    if wanted is None:
        return CALLS
    if wanted != protocol.RELAY_CALL_HEARTBEAT:
        raise InvalidRequest("calls may only be heartbeat.", "calls")
    return HEARTBEATS_ONLY


def _entries(payload: object) -> list:
    if not isinstance(payload, dict) or not isinstance(payload.get("entries"), list):
        raise InvalidRequest("The body must be an object with a list of entries.", "entries")
    if len(payload["entries"]) > MAX_ENTRIES:
        raise InvalidRequest(f"At most {MAX_ENTRIES} entries a bundle.", "entries")
    return payload["entries"]


def _malformed(entry: object, index: int, calls: frozenset[str]) -> Result | None:
    """The 400 answer of an entry that is not `{"job_id", "token", "call", "body"}`."""
    where = f"entries[{index}]"
    if not isinstance(entry, dict):
        return _refused(400, "invalid_request", "An entry must be an object.", where)
    for name in ("job_id", "token"):
        if not isinstance(entry.get(name), str):
            return _refused(400, "invalid_request", f"{name} must be a string.", f"{where}.{name}")
    if entry.get("call") not in calls:
        allowed = " or ".join(sorted(calls, reverse=True))
        return _refused(400, "invalid_request", f"call must be {allowed}.", f"{where}.call")
    if not isinstance(entry.get("body", {}), dict):
        return _refused(400, "invalid_request", "body must be an object.", f"{where}.body")
    return None


def _store_batches(batches: dict[int, ingestion.Batch], results: list) -> None:
    indexes = list(batches)
    stored = ingestion.ingest_many([batches[index] for index in indexes])
    heard = []
    for index, outcome in zip(indexes, stored, strict=True):
        if isinstance(outcome, Exception):
            results[index] = _failed(outcome)
            continue
        attempt = batches[index].attempt
        heard.append(attempt)
        results[index] = _answer(
            200,
            {
                "accepted": outcome.accepted,
                "duplicates": outcome.duplicates,
                "order": reports.order_for(attempt.job, attempt),
                **reports.shell_hint(attempt),
            },
        )
    reports.runners_heard(heard)


def _record_beats(beats: dict[int, Attempt], results: list) -> None:
    live = reports.runner_heartbeats(list(beats.values()))
    for index, attempt in beats.items():
        if attempt.pk in live:
            order = reports.order_for(attempt.job, attempt)
            results[index] = _answer(200, {"order": order, **reports.shell_hint(attempt)})
        else:
            results[index] = _failed(AttemptSuperseded(attempt.pk))
