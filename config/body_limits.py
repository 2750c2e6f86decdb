"""An ASGI guard in front of Django: a request body is refused before it is read.

Django's ASGI handler reads a whole body (to a temporary file past a small size) before any
view runs, so a view's own limit came too late: any client could make the server spool
gigabytes to disk, a bad token's body included. This guard decides first, per path:

- `POST /api/v1/runner/jobs/<id>/artifacts` with the bearer token of one of that job's
  attempts, not expired (`TOKEN_GRACE_AFTER_END_S`): up to ARTIFACT_MAX_BYTES (the view
  enforces the exact limit and records it);
- `POST /o/<org>/projects/<project>/datasets/` from a signed-in session, and
  `POST /api/v1/projects/<project>/datasets` with a valid API key or from a signed-in
  session: up to DATASET_MAX_BYTES plus room for the form around the file;
- `POST /api/v1/compute/workdirs` (a code archive) with a valid API key or from a signed-in
  session: up to WORKDIR_MAX_BYTES plus room for a multipart envelope;
- `POST /hf/api/{models,datasets}/<ns>/<name>/commit/<revision>` (a hub commit, its files
  inline) with a valid API key: up to HUB_MAX_COMMIT_BYTES;
- everything else: REQUEST_MAX_BYTES.

A `Content-Length` over the limit is answered 413 at once; a body without one is counted
as it streams and cut off at the limit, also with 413. API paths get the API's error shape
(`payload_too_large`); pages get plain text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable

from channels.db import database_sync_to_async
from django.conf import settings
from django.db import InterfaceError, OperationalError
from django.utils.module_loading import import_string
from psycopg_pool import PoolTimeout

from apps.accounts.keys import key_matches, parse_key
from apps.accounts.models import ApiKey
from apps.jobs.execution.tokens import nonce_from
from apps.jobs.runner_api.auth import attempt_refusal, attempts_by_nonce

ASGIApp = Callable[[dict, Callable, Callable], Awaitable[None]]
ARTIFACT_UPLOAD = re.compile(r"^/api/v1/runner/jobs/(?P<job_id>[^/]+)/artifacts/?$")
DATASET_UPLOAD = re.compile(r"^/o/[^/]+/projects/[^/]+/datasets/?$")
DATASET_API_UPLOAD = re.compile(r"^/api/v1/projects/[^/]+/datasets/?$")
WORKDIR_UPLOAD = re.compile(r"^/api/v1/compute/workdirs/?$")
HUB_COMMIT = re.compile(r"^/hf/api/(?:models|datasets)/[^/]+/[^/]+/commit/[^/]+$")
FORM_OVERHEAD_BYTES = 1024 * 1024


class BodyTooLarge(Exception):
    pass


def _headers(scope: dict) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}


def _artifact_uploader(job_id: str, authorization: str) -> bool:
    """Whether the token opens this job's runner endpoints now: an attempt of the job whose
    token has not expired (the view's own check, `attempt_refusal`). Any other token's body
    is held to REQUEST_MAX_BYTES before the view's 401 or 404."""
    scheme, _, token = authorization.partition(" ")
    nonce = nonce_from(token.strip()) if scheme.lower() == "bearer" else None
    if nonce is None:
        return False
    return attempt_refusal(attempts_by_nonce([nonce]).get(nonce), job_id) is None


def _api_key_valid(authorization: str) -> bool:
    scheme, _, raw = authorization.partition(" ")
    parsed = parse_key(raw.strip()) if scheme.lower() == "bearer" else None
    if parsed is None:
        return False
    key = ApiKey.objects.active().filter(prefix=parsed.prefix).first()
    return key is not None and key_matches(parsed.full, key.hashed_key)


def _signed_in(cookie_header: str) -> bool:
    name = settings.SESSION_COOKIE_NAME
    for part in cookie_header.split(";"):
        key, _, value = part.strip().partition("=")
        if key == name and value:
            store = import_string(f"{settings.SESSION_ENGINE}.SessionStore")
            return bool(store(session_key=value).get("_auth_user_id"))
    return False


async def _ask(check: Callable[..., bool], *args: str) -> bool:
    """`check(*args)` on a database thread. The lookups run before Django's request begins,
    so they close a connection the database ended themselves (database_sync_to_async, as a
    request's start and end would). A connection the database ended after the pool last
    checked it fails the first query: it is closed, and the lookup (a read) asked once more
    on a fresh one rather than answered 500 (not after the pool had none to give: that
    waited its timeout already)."""
    try:
        return await database_sync_to_async(check)(*args)
    except (OperationalError, InterfaceError) as exc:
        if isinstance(exc.__cause__, PoolTimeout):
            raise
        return await database_sync_to_async(check)(*args)


async def body_limit(scope: dict) -> int:
    """The most bytes this request's body may have."""
    path, headers = scope["path"], _headers(scope)
    if scope["method"] == "POST":
        match = ARTIFACT_UPLOAD.match(path)
        if match and await _ask(
            _artifact_uploader, match["job_id"], headers.get("authorization", "")
        ):
            return settings.ARTIFACT_MAX_BYTES
        if DATASET_UPLOAD.match(path) and await _ask(_signed_in, headers.get("cookie", "")):
            return settings.DATASET_MAX_BYTES + FORM_OVERHEAD_BYTES
        api_upload = DATASET_API_UPLOAD.match(path) or WORKDIR_UPLOAD.match(path)
        if api_upload and (
            await _ask(_api_key_valid, headers.get("authorization", ""))
            or await _ask(_signed_in, headers.get("cookie", ""))
        ):
            if WORKDIR_UPLOAD.match(path):
                return settings.WORKDIR_MAX_BYTES + FORM_OVERHEAD_BYTES
            return settings.DATASET_MAX_BYTES + FORM_OVERHEAD_BYTES
        if HUB_COMMIT.match(path) and await _ask(_api_key_valid, headers.get("authorization", "")):
            return settings.HUB_MAX_COMMIT_BYTES
    return settings.REQUEST_MAX_BYTES


async def _refuse(scope: dict, send: Callable, limit: int) -> None:
    message = f"The request body is larger than this server accepts here ({limit} bytes)."
    if scope["path"].startswith("/api/"):
        error = {"type": "payload_too_large", "message": message, "param": None}
        body, content_type = json.dumps({"error": error}).encode(), b"application/json"
    else:
        body, content_type = message.encode(), b"text/plain; charset=utf-8"
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", content_type),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def guard_request_bodies(app: ASGIApp) -> ASGIApp:
    async def guarded(scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        limit = await body_limit(scope)
        announced = _headers(scope).get("content-length")
        if announced and announced.isascii() and announced.isdigit() and int(announced) > limit:
            await _refuse(scope, send, limit)
            return
        received = 0
        started = False

        async def counting_receive() -> dict:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLarge
            return message

        async def tracking_send(message: dict) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await app(scope, counting_receive, tracking_send)
        except BodyTooLarge:
            if not started:
                await _refuse(scope, send, limit)

    return guarded
