"""Websocket consumers through the real ASGI application (origin check, session auth)."""

import pytest
from channels.db import database_sync_to_async
from channels.testing.websocket import WebsocketCommunicator
from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
from django.contrib.sessions.backends.db import SessionStore
from django.db import connections

from apps.jobs import services
from apps.jobs.states import JobState
from config.asgi import application
from tests.jobs.helpers import make_job

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


def _session_cookie(user) -> str:
    session = SessionStore()
    session[SESSION_KEY] = str(user.pk)
    session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.save()
    return f"{settings.SESSION_COOKIE_NAME}={session.session_key}"


async def _socket(path: str, user=None, origin: str = "http://127.0.0.1") -> WebsocketCommunicator:
    headers = [(b"origin", origin.encode()), (b"host", b"127.0.0.1")]
    if user is not None:
        cookie = await database_sync_to_async(_session_cookie)(user)
        headers.append((b"cookie", cookie.encode()))
    return WebsocketCommunicator(application, path, headers=headers)


async def test_a_member_receives_the_jobs_pushes(member, org):
    job = await database_sync_to_async(make_job)(org)
    socket = await _socket(f"/ws/jobs/{job.public_id}/", member)
    connected, _ = await socket.connect()
    assert connected
    await database_sync_to_async(services.job_transition)(job_id=job.pk, to=JobState.ALLOCATING)
    html = await socket.receive_from(timeout=5)
    assert 'data-state="allocating"' in html
    await socket.disconnect()


async def test_a_non_member_is_closed_4403_without_data(outsider, org):
    job = await database_sync_to_async(make_job)(org)
    socket = await _socket(f"/ws/jobs/{job.public_id}/", outsider)
    connected, _ = await socket.connect()
    assert connected  # the handshake completes so the close code reaches the page
    assert await socket.receive_output(timeout=2) == {"type": "websocket.close", "code": 4403}


async def test_an_anonymous_socket_is_closed_4401(org):
    job = await database_sync_to_async(make_job)(org)
    socket = await _socket(f"/ws/jobs/{job.public_id}/")
    await socket.connect()
    assert await socket.receive_output(timeout=2) == {"type": "websocket.close", "code": 4401}


async def test_a_foreign_origin_is_refused(member, org):
    job = await database_sync_to_async(make_job)(org)
    socket = await _socket(f"/ws/jobs/{job.public_id}/", member, origin="http://evil.example")
    connected, _ = await socket.connect()
    assert not connected


async def test_the_project_socket_checks_membership(member, outsider, project):
    ok = await _socket(f"/ws/projects/{project.public_id}/", member)
    assert (await ok.connect())[0]
    await ok.disconnect()
    refused = await _socket(f"/ws/projects/{project.public_id}/", outsider)
    await refused.connect()
    assert await refused.receive_output(timeout=2) == {"type": "websocket.close", "code": 4403}
