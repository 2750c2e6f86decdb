"""Websockets for live pages. A consumer authorises, joins a group and forwards what the
broadcaster rendered (apps.jobs.live.push) — no rendering per viewer here.

Authorisation is not only at connect: before forwarding a push, a socket checks again that
its user is still an active member who can see the job (or project), at most once every
`WS_REAUTH_INTERVAL_S` seconds per socket (a setting, default 30), so a removed member stops
receiving within that interval at the cost of one query per socket per interval. A socket
that fails the check is closed with 4403 and the push is not sent.

Each user holds at most `WS_MAX_SOCKETS_PER_USER` sockets (a setting, default 20), counted
in Redis across every process: a sorted set per user of the open sockets' channel names,
each scored with when it was last seen (connect, then each re-check), so an entry a crashed
process left behind expires on its own after `WATCH_TTL_S`.

Close codes: 4401 not signed in; 4403 not (or no longer) a member of the object's
organization; 4429 too many sockets for this user. A refusal at connect is sent right after
the handshake, before any data, so the page can tell a refusal from a network drop.
"""

from __future__ import annotations

from channels.db import database_sync_to_async

from apps.core.live import (  # noqa: F401  (names this module has always offered)
    CLOSE_FORBIDDEN,
    CLOSE_TOO_MANY,
    CLOSE_UNAUTHENTICATED,
    SOCKETS_KEY,
    WS_MAX_SOCKETS_PER_USER,
    WS_REAUTH_INTERVAL_S,
    GroupConsumer,
    max_sockets_per_user,
    reauth_interval_s,
    sockets_key,
)
from apps.jobs.live.push import job_group, project_group
from apps.jobs.models import Job
from apps.projects.models import Project


def _visible_jobs(user):
    # One filter() call: the membership and its user's activity are the same join.
    return Job.objects.filter(
        organization__memberships__user=user, organization__memberships__user__is_active=True
    )


@database_sync_to_async
def _can_see_job(user, job_id: str) -> bool:
    return _visible_jobs(user).filter(public_id=job_id).exists()


@database_sync_to_async
def _can_see_project(user, project_id: str) -> bool:
    return Project.objects.filter(
        organization__memberships__user=user,
        organization__memberships__user__is_active=True,
        public_id=project_id,
    ).exists()


class JobConsumer(GroupConsumer):
    def _object_id(self) -> str:
        return self.scope["url_route"]["kwargs"]["job_id"]

    async def _allowed(self, user) -> bool:
        return await _can_see_job(user, self._object_id())

    def _group_for(self) -> str:
        return job_group(self._object_id())

    async def job_push(self, message: dict) -> None:
        await self._forward(message)


class ProjectJobsConsumer(GroupConsumer):
    def _object_id(self) -> str:
        return self.scope["url_route"]["kwargs"]["project_id"]

    async def _allowed(self, user) -> bool:
        return await _can_see_project(user, self._object_id())

    def _group_for(self) -> str:
        return project_group(self._object_id())

    async def project_push(self, message: dict) -> None:
        await self._forward(message)
