"""Building jobs for tests through the real services."""

from __future__ import annotations

import base64
import uuid
from datetime import timedelta

from django.utils import timezone

from apps.jobs import services
from apps.jobs.execution import dispatch, reports
from apps.jobs.models import Attempt, Job
from apps.jobs.states import JobState as S

# A legal path from `requested` to each state, so a test job reaches it through the one
# writer of Job.state (and the counters stay true).
PATH_TO = {
    S.REQUESTED: [],
    S.ALLOCATING: [S.ALLOCATING],
    S.PROVISIONING: [S.ALLOCATING, S.PROVISIONING],
    S.RUNNING: [S.ALLOCATING, S.PROVISIONING, S.RUNNING],
    S.FINALIZING: [S.ALLOCATING, S.PROVISIONING, S.RUNNING, S.FINALIZING],
    S.SUCCEEDED: [S.ALLOCATING, S.PROVISIONING, S.RUNNING, S.FINALIZING, S.SUCCEEDED],
    S.FAILED: [S.FAILED],
    S.PREEMPTED: [S.ALLOCATING, S.PROVISIONING, S.PREEMPTED],
    S.TERMINATING: [S.TERMINATING],
    S.TERMINATED: [S.TERMINATING, S.TERMINATED],
}


def job_body(**overrides) -> dict:
    body = {
        "name": "train",
        "compute": {"accelerator": "cpu", "gpu_count": 1, "ephemeral_disk_gb": 10},
        "container": {"image": "python:3.11-slim", "command": ["python", "-c", "print(1)"]},
    }
    body.update(overrides)
    return body


def script_b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def make_job(org, *, state: str = S.REQUESTED, **overrides) -> Job:
    result = services.job_create(
        organization=org, payload=job_body(**overrides), idempotency_key=uuid.uuid4().hex
    )
    job = result.job
    for step in PATH_TO[state]:
        job = services.job_transition(job_id=job.pk, to=step)
    return job


def submit_on(org, slots, *, priority: str = "standard", kind: str | None = None) -> Job:
    job = make_job(
        org,
        priority_class=priority,
        compute={"accelerator": slots.accelerator, "gpu_count": 1, "ephemeral_disk_gb": 1},
    )
    if kind:
        Job.objects.filter(pk=job.pk).update(kind=kind)
    return Job.objects.get(pk=job.pk)


def running(job: Job, *, started_minutes_ago: float = 1, handle: dict | None = None) -> Attempt:
    """Place `job` and play its runner up to `running`."""
    attempt = dispatch.allocate(job.pk)
    assert attempt is not None, "no room for the job"
    services.job_transition(job_id=job.pk, to=S.PROVISIONING)
    Attempt.objects.filter(pk=attempt.pk).update(
        launched_at=timezone.now(), handle=handle or {"pid": 0, "pgid": 0, "workdir": "/none"}
    )
    reports.runner_started(attempt.pk)
    Attempt.objects.filter(pk=attempt.pk).update(
        started_at=timezone.now() - timedelta(minutes=started_minutes_ago)
    )
    return Attempt.objects.get(pk=attempt.pk)


def asgi_request(
    method: str,
    path: str,
    *,
    query: str = "",
    headers: dict[str, str] | None = None,
    chunks: list[bytes] = (),
) -> tuple[int, bytes]:
    """Send a request through Django's ASGI handler as uvicorn would, the body in `chunks`
    and no Content-Length unless `headers` has one (a chunked upload). Runs in the test's
    thread, so it sees the test's database transaction. Returns (status, body)."""
    import asyncio

    from asgiref.sync import async_to_sync
    from django.core.handlers.asgi import ASGIHandler
    from django.core.signals import request_finished, request_started
    from django.db import close_old_connections

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()],
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 80),
    }
    messages = [{"type": "http.request", "body": chunk, "more_body": True} for chunk in chunks]
    messages.append({"type": "http.request", "body": b"", "more_body": False})
    sent: list[dict] = []

    async def receive() -> dict:
        if messages:
            return messages.pop(0)
        await asyncio.Event().wait()  # the client stays connected; Django cancels this
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        sent.append(message)

    # As Django's own test clients do: a real server closes the database connection after
    # each request, which here would be the test's own, inside its transaction.
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        async_to_sync(ASGIHandler())(scope, receive, send)
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return status, body


def append_log(job: Job, messages: list[str], source: str = "user") -> None:
    """Store `messages` as lines of the job's first attempt, as the control plane writes them."""
    services.logs_append(
        job=job,
        attempt=1,
        lines=[
            services.LogLineIn(timestamp=timezone.now(), message=m, source=source) for m in messages
        ],
    )
