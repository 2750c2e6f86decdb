"""Celery tasks for endpoints. Thin: load by id, call the service (apps.core.tasks)."""

from __future__ import annotations

from apps.core.tasks import trainyard_task
from apps.serving import services


@trainyard_task("serving.sync_endpoint")
def sync_endpoint(job_id: int) -> None:
    """The serve job `job_id`'s engine announced its port (`apps.serving.kind`)."""
    endpoint = services.endpoint_for_job(job_id)
    if endpoint is not None:
        services.endpoint_sync(endpoint.pk)


@trainyard_task("serving.sync_endpoint_by_id")
def sync_endpoint_by_id(endpoint_id: int) -> None:
    services.endpoint_sync(endpoint_id)


@trainyard_task("serving.sync_all", acks_late=False, max_retries=0)
def sync_all() -> None:
    services.sync_all()
