"""Websockets for live pages. A consumer authorises, joins a group and forwards what the
broadcaster rendered (apps.jobs.realtime) — no rendering per viewer here.

Close codes: 4401 not signed in; 4403 not a member of the object's organization (sent right
after the handshake, before any data, so the page can tell a refusal from a network drop).
"""

from __future__ import annotations

import redis.asyncio as aioredis
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings

from apps.jobs.live.push import WATCH_TTL_S, job_group, project_group, watch_key
from apps.jobs.models import Job
from apps.projects.models import Project


async def _watchers(group: str, delta: int) -> None:
    """Count this page in or out of the group's watchers (see apps.jobs.realtime)."""
    client = aioredis.Redis.from_url(settings.REDIS_URL)
    try:
        key = watch_key(group)
        await client.incrby(key, delta)
        await client.expire(key, WATCH_TTL_S)
    finally:
        await client.aclose()


def _visible_jobs(user):
    return Job.objects.filter(organization__memberships__user=user)


@database_sync_to_async
def _can_see_job(user, job_id: str) -> bool:
    return _visible_jobs(user).filter(public_id=job_id).exists()


@database_sync_to_async
def _can_see_project(user, project_id: str) -> bool:
    return Project.objects.filter(
        organization__memberships__user=user, public_id=project_id
    ).exists()


class _GroupConsumer(AsyncWebsocketConsumer):
    group: str | None = None

    async def _refuse(self, code: int) -> None:
        await self.accept()
        await self.close(code=code)

    async def _join(self, group: str) -> None:
        self.group = group
        await self.channel_layer.group_add(group, self.channel_name)
        await _watchers(group, +1)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        if self.group:
            await self.channel_layer.group_discard(self.group, self.channel_name)
            await _watchers(self.group, -1)

    async def receive(self, text_data=None, bytes_data=None) -> None:
        """Pages only listen; anything they send is ignored."""


class JobConsumer(_GroupConsumer):
    async def connect(self) -> None:
        user = self.scope.get("user")
        job_id = self.scope["url_route"]["kwargs"]["job_id"]
        if user is None or not user.is_authenticated:
            await self._refuse(4401)
        elif not await _can_see_job(user, job_id):
            await self._refuse(4403)
        else:
            await self._join(job_group(job_id))

    async def job_push(self, message: dict) -> None:
        await self.send(text_data=message["html"])


class ProjectJobsConsumer(_GroupConsumer):
    async def connect(self) -> None:
        user = self.scope.get("user")
        project_id = self.scope["url_route"]["kwargs"]["project_id"]
        if user is None or not user.is_authenticated:
            await self._refuse(4401)
        elif not await _can_see_project(user, project_id):
            await self._refuse(4403)
        else:
            await self._join(project_group(project_id))

    async def project_push(self, message: dict) -> None:
        await self.send(text_data=message["html"])
