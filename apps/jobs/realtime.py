"""Live updates: channel-group names and the broadcasts sent after a write commits.

Browsers (and anything else on a websocket) join `job.<public_id>` or
`project.<public_id>`; consumers turn these messages into rendered partials.
Broadcasts run on commit and never fail the write that caused them: the channel layer may
drop messages, so clients re-fetch what they missed by sequence id.
"""

from __future__ import annotations

import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

logger = logging.getLogger(__name__)


def job_group(job_public_id: str) -> str:
    return f"job.{job_public_id}"


def project_group(project_public_id: str) -> str:
    return f"project.{project_public_id}"


def broadcast_job_changed(
    *, job_public_id: str, project_public_id: str, state: str, event_id: int | None
) -> None:
    message = {
        "type": "job.changed",
        "job": job_public_id,
        "state": state,
        "event_id": event_id,
    }
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(job_group(job_public_id), message)
        async_to_sync(layer.group_send)(project_group(project_public_id), message)
    except Exception:  # the write has committed; a lost broadcast is recovered by clients
        logger.warning("broadcast for %s failed", job_public_id, exc_info=True)


def broadcast_output(*, job_public_id: str, last_log_id: int, last_metric_id: int | None) -> None:
    """New log lines (and maybe metric points) up to these ids; clients fetch after the last
    id they hold, so a dropped message only delays them."""
    layer = get_channel_layer()
    if layer is None:
        return
    message = {
        "type": "job.output",
        "job": job_public_id,
        "last_log_id": last_log_id,
        "last_metric_id": last_metric_id,
    }
    try:
        async_to_sync(layer.group_send)(job_group(job_public_id), message)
    except Exception:
        logger.warning("output broadcast for %s failed", job_public_id, exc_info=True)
