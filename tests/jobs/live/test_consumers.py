"""Websocket consumers through the real ASGI application (origin check, session auth)."""

import pytest
from channels.db import database_sync_to_async
from django.db import connections

from apps.accounts import services as account_services
from apps.accounts.models import Membership
from apps.jobs import services
from apps.jobs.live import consumers
from apps.jobs.states import JobState
from tests.jobs.helpers import make_job
from tests.sockets import forget_socket_counts, websocket

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture(autouse=True)
async def _close_connections_of_the_db_thread():
    """database_sync_to_async works in a thread of its own; close its connection so the test
    database can be dropped at the end of the session."""
    yield
    await database_sync_to_async(connections.close_all)()


async def test_a_member_receives_the_jobs_pushes(member, org):
    job = await database_sync_to_async(make_job)(org)
    socket = await websocket(f"/ws/jobs/{job.public_id}/", member)
    connected, _ = await socket.connect()
    assert connected
    await database_sync_to_async(services.job_transition)(job_id=job.pk, to=JobState.ALLOCATING)
    html = await socket.receive_from(timeout=5)
    assert 'data-state="allocating"' in html
    await socket.disconnect()


async def test_a_non_member_is_closed_4403_without_data(outsider, org):
    job = await database_sync_to_async(make_job)(org)
    socket = await websocket(f"/ws/jobs/{job.public_id}/", outsider)
    connected, _ = await socket.connect()
    assert connected  # the handshake completes so the close code reaches the page
    assert await socket.receive_output(timeout=2) == {"type": "websocket.close", "code": 4403}


async def test_an_anonymous_socket_is_closed_4401(org):
    job = await database_sync_to_async(make_job)(org)
    socket = await websocket(f"/ws/jobs/{job.public_id}/")
    await socket.connect()
    assert await socket.receive_output(timeout=2) == {"type": "websocket.close", "code": 4401}


async def test_a_foreign_origin_is_refused(member, org):
    job = await database_sync_to_async(make_job)(org)
    socket = await websocket(f"/ws/jobs/{job.public_id}/", member, origin="http://evil.example")
    connected, _ = await socket.connect()
    assert not connected


async def test_the_project_socket_checks_membership(member, outsider, project):
    ok = await websocket(f"/ws/projects/{project.public_id}/", member)
    assert (await ok.connect())[0]
    await ok.disconnect()
    refused = await websocket(f"/ws/projects/{project.public_id}/", outsider)
    await refused.connect()
    assert await refused.receive_output(timeout=2) == {"type": "websocket.close", "code": 4403}


# -- authorisation after connect, and the per-user socket cap -----------------------------


@pytest.fixture(autouse=True)
async def _no_socket_counts_left_over():
    """Socket counts live in Redis for a day; user ids restart with each test database."""
    await forget_socket_counts()
    yield


def _remove(user, org):
    account_services.membership_remove(
        membership=Membership.objects.get(user=user, organization=org)
    )


async def test_a_removed_member_is_closed_4403_at_the_next_push(member, org, settings):
    settings.WS_REAUTH_INTERVAL_S = 0
    job = await database_sync_to_async(make_job)(org)
    socket = await websocket(f"/ws/jobs/{job.public_id}/", member)
    assert (await socket.connect())[0]
    await database_sync_to_async(services.job_transition)(job_id=job.pk, to=JobState.ALLOCATING)
    assert 'data-state="allocating"' in await socket.receive_from(timeout=5)

    await database_sync_to_async(_remove)(member, org)
    await database_sync_to_async(services.job_transition)(job_id=job.pk, to=JobState.PROVISIONING)
    assert await socket.receive_output(timeout=5) == {"type": "websocket.close", "code": 4403}
    assert await socket.receive_nothing(timeout=0.5)
    await socket.disconnect()


async def test_a_removed_member_is_closed_4403_on_the_project_socket(
    member, org, project, settings
):
    settings.WS_REAUTH_INTERVAL_S = 0
    job = await database_sync_to_async(make_job)(org, project=project.public_id)
    socket = await websocket(f"/ws/projects/{project.public_id}/", member)
    assert (await socket.connect())[0]
    await database_sync_to_async(_remove)(member, org)
    await database_sync_to_async(services.job_transition)(job_id=job.pk, to=JobState.ALLOCATING)
    assert await socket.receive_output(timeout=5) == {"type": "websocket.close", "code": 4403}
    await socket.disconnect()


async def test_the_membership_is_checked_at_most_once_per_interval(
    member, org, settings, monkeypatch
):
    settings.WS_REAUTH_INTERVAL_S = 3600
    job = await database_sync_to_async(make_job)(org)
    socket = await websocket(f"/ws/jobs/{job.public_id}/", member)
    assert (await socket.connect())[0]
    checks = []
    original = consumers.JobConsumer._allowed

    async def counted(self, user):
        checks.append(user.pk)
        return await original(self, user)

    monkeypatch.setattr(consumers.JobConsumer, "_allowed", counted)
    for to in (JobState.ALLOCATING, JobState.PROVISIONING):
        await database_sync_to_async(services.job_transition)(job_id=job.pk, to=to)
        await socket.receive_from(timeout=5)
    assert checks == []  # checked at connect, not again within the interval
    await socket.disconnect()


async def test_a_user_holds_at_most_the_maximum_of_sockets(member, viewer, org, settings):
    settings.WS_MAX_SOCKETS_PER_USER = 2
    job = await database_sync_to_async(make_job)(org)
    path = f"/ws/jobs/{job.public_id}/"
    held = []
    for _ in range(2):
        socket = await websocket(path, member)
        assert (await socket.connect())[0]
        held.append(socket)
    one_too_many = await websocket(path, member)
    assert (await one_too_many.connect())[0]
    assert await one_too_many.receive_output(timeout=2) == {"type": "websocket.close", "code": 4429}
    await one_too_many.disconnect()

    other_user = await websocket(path, viewer)
    assert (await other_user.connect())[0]
    assert await other_user.receive_nothing(timeout=0.2)
    await other_user.disconnect()

    await held.pop().disconnect()  # a closed socket gives its place back
    again = await websocket(path, member)
    assert (await again.connect())[0]
    await database_sync_to_async(services.job_transition)(job_id=job.pk, to=JobState.ALLOCATING)
    assert 'data-state="allocating"' in await again.receive_from(timeout=5)
    for socket in (again, *held):
        await socket.disconnect()
