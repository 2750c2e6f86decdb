"""Transitions broadcast to the job's and the project's channel groups (real Redis channel
layer), and only once the transaction has committed."""

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from apps.jobs import realtime, services
from apps.jobs.states import JobState
from tests.jobs.helpers import make_job

pytestmark = pytest.mark.django_db


def _listen(group: str) -> str:
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(group, channel)
    return channel


def _receive(channel: str) -> dict:
    async def receive():
        import asyncio

        return await asyncio.wait_for(get_channel_layer().receive(channel), timeout=5)

    return async_to_sync(receive)()


def test_a_transition_is_broadcast_after_commit(org, django_capture_on_commit_callbacks):
    job = make_job(org)
    job_channel = _listen(realtime.job_group(job.public_id))
    project_channel = _listen(realtime.project_group(job.project.public_id))

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        services.job_transition(job_id=job.pk, to=JobState.ALLOCATING)
    assert len(callbacks) == 1  # queued for commit, not sent inside the transaction
    callbacks[0]()

    for channel in (job_channel, project_channel):
        message = _receive(channel)
        assert message["type"] == "job.changed"
        assert (message["job"], message["state"]) == (job.public_id, "allocating")
        assert message["event_id"] == job.events.latest("id").id
