"""The control plane's calls to an engine (`engine/`, or vLLM behind the same front): where
it is, and the management calls the sync makes (models, adapter upload, load, unload, smoke).

Every call carries the attempt's engine secret. Errors: EngineUnavailable (the engine cannot
be reached or answered 5xx: retry later) and EngineRefused (a 4xx, with the engine's error
type: permanent for what was asked).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import httpx

from apps.core.errors import Retryable
from apps.jobs.models import Attempt, Job
from apps.jobs.states import JobState
from apps.providers.backends import backend_for
from apps.providers.backends.base import BackendError
from apps.serving.adapters import Archive
from apps.serving.kind import engine_secret
from runner import protocol

TIMEOUT = httpx.Timeout(30.0, connect=5.0)
# Streams: a long generation may take minutes between its first and last token.
STREAM_TIMEOUT = httpx.Timeout(connect=5.0, read=300.0, write=30.0, pool=10.0)
UPLOAD_CHUNK = 1024 * 1024


@dataclass(frozen=True)
class EngineAddress:
    """Where a serve job's running engine answers, and the secret it wants."""

    url: str
    secret: str
    attempt: int  # the attempt's number

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.secret}"}


_async_clients: dict[int, httpx.AsyncClient] = {}


def async_client() -> httpx.AsyncClient:
    """The async client for streams to engines (the proxy, the Playground): one connection
    pool per event loop (a web process runs one)."""
    loop = asyncio.get_running_loop()
    client = _async_clients.get(id(loop))
    if client is None:
        client = _async_clients[id(loop)] = httpx.AsyncClient(timeout=STREAM_TIMEOUT)
    return client


class EngineUnavailable(Retryable):
    """The engine could not be reached, or failed (5xx)."""


class EngineRefused(Exception):
    """The engine answered 4xx: what was asked cannot be done there."""

    def __init__(self, status: int, error_type: str, message: str) -> None:
        super().__init__(f"{status} {error_type}: {message}")
        self.status = status
        self.error_type = error_type
        self.message = message


def address_of(job: Job, attempt: Attempt | None) -> EngineAddress | None:
    """The engine of `job`'s live `attempt` once it announced its port, else None."""
    if (
        attempt is None
        or job.state != JobState.RUNNING
        or attempt.number != job.attempt_count
        or attempt.ended_at is not None
        or attempt.service_port is None
        or attempt.provider is None
    ):
        return None
    try:
        url = backend_for(attempt.provider).endpoint_url(attempt.handle, attempt.service_port)
    except BackendError:
        return None
    return EngineAddress(url=url, secret=engine_secret(attempt), attempt=attempt.number)


def address_for(job: Job | None) -> EngineAddress | None:
    if job is None:
        return None
    attempt = (
        Attempt.objects.select_related("provider").filter(job=job, number=job.attempt_count).first()
    )
    return address_of(job, attempt)


def _raise_for(response: httpx.Response) -> None:
    if response.status_code < 400:
        return
    if response.status_code >= 500:
        raise EngineUnavailable(f"the engine answered {response.status_code}")
    try:
        error = response.json().get("error") or {}
    except ValueError:
        error = {}
    raise EngineRefused(
        response.status_code, str(error.get("type") or "error"), str(error.get("message") or "")
    )


def _call(
    address: EngineAddress, method: str, path: str, headers: dict | None = None, **kwargs
) -> httpx.Response:
    try:
        response = httpx.request(
            method,
            address.url + path,
            headers={**address.headers, **(headers or {})},
            timeout=TIMEOUT,
            **kwargs,
        )
    except httpx.HTTPError as exc:
        raise EngineUnavailable(f"the engine at {address.url} did not answer: {exc}") from exc
    _raise_for(response)
    return response


def loaded_models(address: EngineAddress) -> set[str]:
    """The served names the engine answers to (the base's included)."""
    data = _call(address, "GET", "/v1/models").json()
    return {str(item.get("id")) for item in data.get("data", []) if isinstance(item, dict)}


def load_adapter(address: EngineAddress, served_name: str, archive: Archive) -> None:
    """Upload `archive` (a tar.gz of an adapter directory: an artifact's, or one made of a
    hub commit, apps.serving.adapters) and load it as `served_name`. A name the engine
    already has counts as loaded: names are never reused."""
    try:
        uploaded = _call(
            address,
            "PUT",
            f"/trainyard/adapters/{served_name}",
            content=archive.chunks(),
            headers={
                protocol.SHA256_HEADER: archive.sha256,
                "Content-Type": protocol.ARTIFACT_CONTENT_TYPE,
                "Content-Length": str(archive.size),
            },
        ).json()
        _call(
            address,
            "POST",
            "/v1/load_lora_adapter",
            json={"lora_name": served_name, "lora_path": uploaded["lora_path"]},
        )
    except EngineRefused as exc:
        if exc.error_type != "adapter_exists":
            raise


def unload_adapter(address: EngineAddress, served_name: str) -> None:
    """Unload `served_name` once its requests in flight are done; a name the engine does
    not have is already unloaded."""
    try:
        _call(address, "POST", "/v1/unload_lora_adapter", json={"lora_name": served_name})
    except EngineRefused as exc:
        if exc.status != 404:
            raise


def smoke(address: EngineAddress, served_name: str) -> str:
    """One short greedy completion on `served_name`; its text."""
    answer = _call(
        address,
        "POST",
        "/v1/completions",
        json={"model": served_name, "prompt": "Hello", "max_tokens": 2, "temperature": 0},
    ).json()
    return str(answer["choices"][0]["text"])
