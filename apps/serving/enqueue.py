"""Send the serving and Playground tasks by their registered names.

The kind hooks and services start these without importing `tasks`, which sits above them
(and, for the Playground's, in an app serving must not import): a task is named here and
Celery finds it by that name. `tests/test_enqueue.py` checks that every name below is a
registered task.
"""

from __future__ import annotations

from celery import current_app

SYNC_ENDPOINT = "serving.sync_endpoint"
SYNC_ENDPOINT_BY_ID = "serving.sync_endpoint_by_id"
PLAYGROUND_SERVER_READY = "playground.server_ready"
TASK_NAMES = (SYNC_ENDPOINT, SYNC_ENDPOINT_BY_ID, PLAYGROUND_SERVER_READY)


def sync_endpoint(job_id: int) -> None:
    """Bring the endpoint that `job_id` serves up to date (its engine just answered)."""
    current_app.send_task(SYNC_ENDPOINT, args=[job_id])


def sync_endpoint_by_id(endpoint_id: int) -> None:
    current_app.send_task(SYNC_ENDPOINT_BY_ID, args=[endpoint_id])


def playground_server_ready(job_id: int) -> None:
    """Tell the Playground server that `job_id` runs that its engine answers."""
    current_app.send_task(PLAYGROUND_SERVER_READY, args=[job_id])
