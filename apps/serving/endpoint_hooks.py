"""Hooks of the apps above `serving` that act when an endpoint goes live or fails (webhooks
deliver them), found by dotted path (`apps.core.hooks`): `serving` imports nothing of them.

Both are called after the write that changed the endpoint has committed, in the process that
ran the sync (a Celery worker); a hook that raises is logged and does not stop the others or
the sync.

- READY_HOOKS, as `hook(endpoint=…, revision=…)`: a revision was loaded, smoke-tested and
  made current (the first one, or a swap).
- FAILED_HOOKS, as `hook(endpoint=…, revision=…, message=…)`: a revision failed to load or
  failed its smoke test; the endpoint keeps answering with what it had.

An endpoint whose serve job ends without being stopped is failed too (see
`selectors.endpoint_state`); the jobs' outcome hooks (`apps.jobs.outcomes`) tell that one.
"""

from __future__ import annotations

from apps.core.hooks import call_hooks
from apps.serving.models import Endpoint, EndpointRevision

READY_HOOKS: list[str] = [
    "apps.webhooks.hooks.endpoint_ready",
]
FAILED_HOOKS: list[str] = [
    "apps.webhooks.hooks.endpoint_failed",
]


def ready(endpoint: Endpoint, revision: EndpointRevision) -> None:
    call_hooks(
        READY_HOOKS, f"endpoint {endpoint.public_id} ready", endpoint=endpoint, revision=revision
    )


def failed(endpoint: Endpoint, revision: EndpointRevision, message: str) -> None:
    call_hooks(
        FAILED_HOOKS,
        f"endpoint {endpoint.public_id} failed",
        endpoint=endpoint,
        revision=revision,
        message=message,
    )
