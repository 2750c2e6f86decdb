"""The OpenAI-compatible API in front of every endpoint's engine: `POST /v1/chat/completions`,
`POST /v1/completions` and `GET /v1/models`, with Trainyard API keys.

- `Authorization: Bearer ty_…` (any role); no key or a bad one is 401 `unauthenticated`.
  A key is held to the REST API's rules: its requests count in the same window
  (API_REQUESTS_PER_MINUTE, both paths together; past it 429 `rate_limited` with
  Retry-After), its last use is recorded, and an organization whose compute is off is
  refused (403 `tenant_disabled`).
- `model` is an endpoint's name in the key's organization, or `name@r3` to pin revision 3
  (only a revision the engine holds: the current or the previous one). Another
  organization's endpoint is not there: 404 `model_not_found`. A pin that is not `r` and
  up to 9 ASCII digits is 400 `invalid_request`.
- The request goes to the engine under the revision's served name; the engine's answer
  comes back as it is produced (server-sent events pass through event by event), with
  `X-Trainyard-Revision: r<n>` on every answer, errors included once a revision was chosen.
- A client that goes away cancels the upstream request: the engine sees its connection
  close and stops generating.
- Errors keep the API's shape (`{"error": {"type", "message", "param"}}`), which the OpenAI
  SDKs read: 400 `invalid_request`, 401 `unauthenticated`, 403 `tenant_disabled`, 404
  `model_not_found`, 409 `endpoint_stopped`, 429 `rate_limited`, 503
  `endpoint_not_ready` (starting, or restarting after a preemption; with Retry-After).
- Every request is recorded (`EndpointRequest`): status, tokens, latency, time to first
  token. Token counts come from the engine's usage chunk, which the proxy always asks for
  and passes on only when the client asked for it (`stream_options.include_usage`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
from dataclasses import dataclass

import httpx
from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt

from apps.accounts.authentication import touch_key
from apps.accounts.keys import key_matches, parse_key
from apps.accounts.models import ApiKey
from apps.accounts.throttle import api_key_request_counted
from apps.core.api_errors import error_body
from apps.core.errors import TenantDisabled
from apps.jobs.models import Attempt
from apps.serving import engine_client, services
from apps.serving.engine_client import EngineAddress
from apps.serving.models import Endpoint, EndpointRevision

logger = logging.getLogger(__name__)

REVISION_HEADER = "X-Trainyard-Revision"
RETRY_AFTER_S = "5"
PIN_RE = re.compile(r"r([0-9]{1,9})")


class ProxyError(Exception):
    def __init__(
        self,
        status: int,
        error_type: str,
        message: str,
        param: str | None = None,
        retry_after: int | None = None,
    ):
        super().__init__(message)
        self.status, self.error_type, self.message, self.param = status, error_type, message, param
        self.retry_after = retry_after

    def response(self, revision: EndpointRevision | None = None) -> JsonResponse:
        answer = JsonResponse(
            error_body(self.error_type, self.message, self.param), status=self.status
        )
        if self.status == 503:
            answer["Retry-After"] = RETRY_AFTER_S
        if self.retry_after is not None:
            answer["Retry-After"] = str(self.retry_after)
        if self.status == 401:
            answer["WWW-Authenticate"] = 'Bearer realm="api"'
        if revision is not None:
            answer[REVISION_HEADER] = revision.label
        return answer


@dataclass
class Target:
    endpoint: Endpoint
    revision: EndpointRevision
    address: EngineAddress


# -- lookups (sync, run in a thread) -------------------------------------------------------


def _key_for(header: str) -> ApiKey:
    scheme, _, raw = header.partition(" ")
    if not header:
        raise ProxyError(
            401, "unauthenticated", "An API key is required: Authorization: Bearer ty_…"
        )
    parsed = parse_key(raw.strip()) if scheme.lower() == "bearer" else None
    key = (
        ApiKey.objects.active().select_related("organization").filter(prefix=parsed.prefix).first()
        if parsed
        else None
    )
    if key is None or not key_matches(parsed.full, key.hashed_key):
        raise ProxyError(401, "unauthenticated", "Invalid API key.")
    # In the REST API's order: authentication (which records the use), permission, throttle.
    touch_key(key)
    if not key.organization.compute_enabled:
        raise ProxyError(403, TenantDisabled.error_type, str(TenantDisabled.default_detail))
    wait = api_key_request_counted(key)
    if wait:
        raise ProxyError(
            429, "rate_limited", f"Too many requests: try again in {wait} s.", retry_after=wait
        )
    return key


def _target(key: ApiKey, model: object) -> Target:
    if not isinstance(model, str) or not model:
        raise ProxyError(400, "invalid_request", "model is an endpoint's name.", "model")
    name, at, pin = model.partition("@")
    pinned = PIN_RE.fullmatch(pin)
    if at and pinned is None:
        raise ProxyError(
            400, "invalid_request", "A pinned revision is written name@r<number>.", "model"
        )
    if not services.NAME_RE.fullmatch(name):
        raise ProxyError(404, "model_not_found", "No endpoint has that name.", "model")
    endpoint = (
        Endpoint.objects.select_related("current_revision", "job")
        .filter(organization_id=key.organization_id, name=name)
        .first()
    )
    if endpoint is None:
        raise ProxyError(404, "model_not_found", f"No endpoint named {name!r}.", "model")
    if endpoint.state == Endpoint.State.STOPPED:
        raise ProxyError(409, "endpoint_stopped", f"The endpoint {name!r} is stopped.", "model")
    revision = endpoint.current_revision
    if pinned:
        revision = endpoint.revisions.filter(number=int(pinned[1])).first()
        if revision is None:
            raise ProxyError(404, "model_not_found", f"{name!r} has no revision {pin}.", "model")
    if revision is None:
        raise ProxyError(503, "endpoint_not_ready", f"{name!r} is starting.", "model")
    job = endpoint.job
    attempt = (
        Attempt.objects.select_related("provider").filter(job=job, number=job.attempt_count).first()
        if job
        else None
    )
    address = engine_client.address_of(job, attempt) if job else None
    if address is None or revision.loaded_on_attempt != address.attempt:
        if pinned and revision.state != EndpointRevision.State.READY:
            raise ProxyError(404, "model_not_found", f"{model!r} is not served.", "model")
        raise ProxyError(503, "endpoint_not_ready", f"{model!r} is not loaded yet.", "model")
    return Target(endpoint=endpoint, revision=revision, address=address)


def _record(target: Target | None, key: ApiKey, path: str, usage: Usage) -> None:
    if target is None:
        return
    services.endpoint_request_record(
        endpoint=target.endpoint,
        revision=target.revision,
        api_key=key,
        path=path,
        status_code=usage.status,
        stream=usage.stream,
        cancelled=usage.cancelled,
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
        latency_ms=usage.elapsed_ms(),
        ttft_ms=usage.ttft_ms,
        started_at=usage.started_at,
    )


# -- the proxy ---------------------------------------------------------------------------


@dataclass
class Usage:
    started: float
    started_at: object
    stream: bool = False
    status: int = 200
    cancelled: bool = False
    prompt_tokens: int = 0
    completion_tokens: int = 0
    ttft_ms: int | None = None

    def elapsed_ms(self) -> int:
        return int((time.monotonic() - self.started) * 1000)

    def take(self, usage: object) -> None:
        if isinstance(usage, dict):
            self.prompt_tokens = _count(usage.get("prompt_tokens"))
            self.completion_tokens = _count(usage.get("completion_tokens"))


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _parse_body(request: HttpRequest) -> dict:
    try:
        body = json.loads(request.body or b"null")
    except (ValueError, RecursionError):
        raise ProxyError(400, "invalid_request", "The body is not JSON.") from None
    if not isinstance(body, dict):
        raise ProxyError(400, "invalid_request", "The body is a JSON object.")
    return body


async def _proxy(request: HttpRequest, path: str) -> HttpResponse:
    if request.method != "POST":
        return ProxyError(405, "method_not_allowed", "Use POST.").response()
    usage = Usage(started=time.monotonic(), started_at=timezone.now())
    try:
        key = await sync_to_async(_key_for)(request.headers.get("Authorization", ""))
        body = _parse_body(request)
        target = await sync_to_async(_target)(key, body.get("model"))
    except ProxyError as exc:
        return exc.response()
    options = body.get("stream_options")
    wants_usage = isinstance(options, dict) and options.get("include_usage") is True
    usage.stream = body.get("stream") is True
    try:
        upstream = await _send(target, path, body, usage.stream)
        if upstream.status_code == 404:
            # The revision was unloaded between the lookup and the call (two swaps
            # overtook this request): look again, once.
            await upstream.aclose()
            target = await sync_to_async(_target)(key, body.get("model"))
            upstream = await _send(target, path, body, usage.stream)
    except ProxyError as exc:
        usage.status = exc.status
        await sync_to_async(_record)(target, key, path, usage)
        return exc.response(target.revision)
    if usage.stream and upstream.status_code == 200:
        response = StreamingHttpResponse(
            _relay(upstream, usage, wants_usage, lambda: _record(target, key, path, usage)),
            content_type="text/event-stream",
        )
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"
    else:
        content = await upstream.aread()
        await upstream.aclose()
        usage.status = upstream.status_code
        with contextlib.suppress(ValueError, AttributeError):
            usage.take(json.loads(content).get("usage"))
        await sync_to_async(_record)(target, key, path, usage)
        response = HttpResponse(
            content,
            status=upstream.status_code,
            content_type=upstream.headers.get("content-type", "application/json"),
        )
    response[REVISION_HEADER] = target.revision.label
    return response


async def _send(target: Target, path: str, body: dict, stream: bool) -> httpx.Response:
    """Open the upstream request (streamed) for the target's served name. A transport
    failure is a 503."""
    upstream_body = {**body, "model": target.revision.served_name}
    if stream:
        upstream_body["stream_options"] = {"include_usage": True}
    client = engine_client.async_client()
    request = client.build_request(
        "POST", target.address.url + path, json=upstream_body, headers=target.address.headers
    )
    try:
        return await client.send(request, stream=True)
    except httpx.HTTPError as exc:
        logger.warning("engine of %s did not answer: %s", target.endpoint.public_id, exc)
        raise ProxyError(
            503, "endpoint_unavailable", "The endpoint's server did not answer."
        ) from exc


async def _relay(upstream: httpx.Response, usage: Usage, wants_usage: bool, record):
    """Pass the engine's events on as each completes; note the usage chunk (dropped when the
    client did not ask for it). Closing upstream on the way out, a disconnect included,
    is what stops the engine's generation."""
    buffer = b""
    # A client that hangs up once it has the end of the stream was not cut off: the server
    # may close this generator at its last `yield` after the client read `[DONE]`.
    delivered = False
    try:
        async for chunk in upstream.aiter_raw():
            buffer += chunk
            while b"\n\n" in buffer:
                event, buffer = buffer.split(b"\n\n", 1)
                if _is_usage_event(event, usage) and not wants_usage:
                    continue
                if usage.ttft_ms is None and (b'"content"' in event or b'"text"' in event):
                    usage.ttft_ms = usage.elapsed_ms()
                delivered = event.strip() == b"data: [DONE]"
                yield event + b"\n\n"
        delivered = True
        if buffer:
            yield buffer
    except (asyncio.CancelledError, GeneratorExit):
        usage.cancelled = not delivered
        raise
    except httpx.HTTPError:
        usage.status = 502
        logger.warning("the engine's stream broke off", exc_info=True)
    finally:
        await upstream.aclose()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(sync_to_async(record)())


def _is_usage_event(event: bytes, usage: Usage) -> bool:
    if not event.startswith(b"data: {") or b'"usage"' not in event:
        return False
    try:
        data = json.loads(event[6:])
    except ValueError:
        return False
    if isinstance(data, dict) and data.get("usage") and not data.get("choices"):
        usage.take(data["usage"])
        return True
    return False


@csrf_exempt
async def chat_completions(request: HttpRequest) -> HttpResponse:
    return await _proxy(request, "/v1/chat/completions")


@csrf_exempt
async def completions(request: HttpRequest) -> HttpResponse:
    return await _proxy(request, "/v1/completions")


def _models(key: ApiKey) -> list[dict]:
    endpoints = (
        Endpoint.objects.filter(organization_id=key.organization_id)
        .exclude(state=Endpoint.State.STOPPED)
        .order_by("name")
    )
    return [
        {
            "id": endpoint.name,
            "object": "model",
            "created": int(endpoint.created_at.timestamp()),
            "owned_by": key.organization.slug,
            "root": endpoint.base_model,
            "parent": None,
        }
        for endpoint in endpoints
    ]


async def models(request: HttpRequest) -> HttpResponse:
    if request.method != "GET":
        return ProxyError(405, "method_not_allowed", "Use GET.").response()
    try:
        key = await sync_to_async(_key_for)(request.headers.get("Authorization", ""))
    except ProxyError as exc:
        return exc.response()
    return JsonResponse({"object": "list", "data": await sync_to_async(_models)(key)})
