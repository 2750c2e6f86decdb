"""The overview's and the all-jobs list's websockets, through the real ASGI application."""

import pytest
from channels.db import database_sync_to_async

from apps.jobs import services
from apps.jobs.states import JobState
from tests.jobs.helpers import make_job
from tests.jobs.live.test_consumers import (  # noqa: F401
    _close_connections_of_the_db_thread,
    anyio_backend,
)
from tests.sockets import websocket

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


async def test_the_overview_re_renders_when_a_job_changes_state(member, org):
    job = await database_sync_to_async(make_job)(org, name="nightly-eval")
    socket = await websocket("/ws/orgs/acme/overview/", member)
    assert (await socket.connect())[0]
    await database_sync_to_async(services.job_transition)(job_id=job.pk, to=JobState.FAILED)
    html = await socket.receive_from(timeout=5)
    assert 'id="overview-live"' in html and 'hx-swap-oob="true"' in html
    failures = html.split('id="overview-failures"')[1]
    assert "nightly-eval" in failures
    await socket.disconnect()


async def test_an_outsider_cannot_watch_the_overview_or_the_list(outsider, org):
    for path in ("/ws/orgs/acme/overview/", "/ws/orgs/acme/jobs/"):
        socket = await websocket(path, outsider)
        assert (await socket.connect())[0]
        assert await socket.receive_output(timeout=2) == {"type": "websocket.close", "code": 4403}


async def test_the_list_socket_sends_rows_that_match_its_filters_and_removes_the_rest(member, org):
    job = await database_sync_to_async(make_job)(org, name="sweep-7")
    everything = await websocket("/ws/orgs/acme/jobs/", member)
    running_only = await websocket("/ws/orgs/acme/jobs/?state=running", member)
    assert (await everything.connect())[0] and (await running_only.connect())[0]

    await database_sync_to_async(services.job_transition)(job_id=job.pk, to=JobState.ALLOCATING)
    row = await everything.receive_from(timeout=5)
    assert f'id="job-row-{job.public_id}"' in row and 'data-state="allocating"' in row
    assert "afterbegin:#job-list-body" in row
    removal = await running_only.receive_from(timeout=5)
    assert removal == f'<tr id="job-row-{job.public_id}" hx-swap-oob="delete"></tr>'

    for state in (JobState.PROVISIONING, JobState.RUNNING):
        await database_sync_to_async(services.job_transition)(job_id=job.pk, to=state)
    await running_only.receive_from(timeout=5)  # provisioning: not running, removed again
    row = await running_only.receive_from(timeout=5)
    assert 'data-state="running"' in row and "sweep-7" in row
    await everything.disconnect()
    await running_only.disconnect()
