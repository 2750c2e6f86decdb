"""Celery tasks of the Playground. Thin: ids in, call the service (apps.core.tasks)."""

from __future__ import annotations

from apps.core.tasks import trainyard_task
from apps.playground import services


@trainyard_task("playground.server_ready")
def server_ready(job_id: int) -> None:
    """The serve job `job_id`'s engine announced its port (`apps.serving.kind`)."""
    services.server_ready(job_id)


@trainyard_task("playground.stop_idle", acks_late=False, max_retries=0)
def stop_idle() -> None:
    """Beat, every SERVING_SYNC_INTERVAL_S: stop the servers idle past PLAYGROUND_IDLE_S."""
    services.stop_idle()
