"""What other apps may listen to when an endpoint goes live or fails, without
`apps.serving` knowing them (webhooks deliver them).

Both are sent after the write that changed the endpoint has committed, in the process that
ran the sync (a Celery worker). A receiver that raises is logged and does not stop the
others or the sync.

- `endpoint_ready(endpoint, revision)`: a revision was loaded, smoke-tested and made
  current (the first one, or a swap).
- `endpoint_failed(endpoint, revision, message)`: a revision failed to load or failed its
  smoke test; the endpoint keeps answering with what it had.

An endpoint whose serve job ends without being stopped is failed too (see
`selectors.endpoint_state`); that is told by `apps.jobs.signals.job_outcome` for its job.
"""

from __future__ import annotations

import logging

from django.dispatch import Signal

logger = logging.getLogger(__name__)

endpoint_ready = Signal()
endpoint_failed = Signal()


def send(signal: Signal, **kwargs: object) -> None:
    """Send `signal` to every receiver; one that raises is logged, never raised."""
    for receiver, result in signal.send_robust(sender=None, **kwargs):
        if isinstance(result, Exception):
            logger.error("serving signal receiver %r failed", receiver, exc_info=result)
