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

from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from django.template.loader import render_to_string

from apps.accounts.models import Membership, Role
from apps.billing.live import billing_group
from apps.core.live import (  # noqa: F401  (names this module has always offered)
    CLOSE_FORBIDDEN,
    CLOSE_TOO_MANY,
    CLOSE_UNAUTHENTICATED,
    SOCKETS_KEY,
    WS_MAX_SOCKETS_PER_USER,
    WS_REAUTH_INTERVAL_S,
    CoalescingConsumer,
    GroupConsumer,
    count_watchers,
    max_sockets_per_user,
    reauth_interval_s,
    sockets_key,
)
from apps.jobs import overview
from apps.jobs.live.push import job_group, org_jobs_group, overview_group, project_group
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


@database_sync_to_async
def _membership(user, org_slug: str):
    return (
        Membership.objects.select_related("organization")
        .filter(user=user, user__is_active=True, organization__slug=org_slug)
        .first()
    )


class _OrgConsumer:
    """The organization in the path, for a socket of one of its active members."""

    membership = None

    async def _allowed(self, user) -> bool:
        slug = self.scope["url_route"]["kwargs"]["org_slug"]
        membership = await _membership(user, slug)
        if membership is None or (
            self.membership is not None and membership.pk != self.membership.pk
        ):
            return False
        self.membership = membership
        return True


class OverviewConsumer(_OrgConsumer, CoalescingConsumer):
    """The overview's socket, `ws/orgs/<slug>/overview/`: a job of the organization changed
    state or cost (`overview.changed`), or its ledger moved (`billing.changed`, the spend
    cards): the socket re-renders the overview's live part, coalesced to at most one render
    per `coalesce_s`, and always once after the last change."""

    coalesce_s = 1.0
    billing: str | None = None  # the Billing group it also joined

    def _group_for(self) -> str:
        return overview_group(self.membership.organization_id)

    async def _join(self, group: str) -> None:
        await super()._join(group)
        self.billing = billing_group(self.membership.organization_id)
        await self.channel_layer.group_add(self.billing, self.channel_name)
        await count_watchers(self.billing, +1)

    async def _leave(self) -> None:
        billing, self.billing = self.billing, None
        if billing:
            await self.channel_layer.group_discard(billing, self.channel_name)
            await count_watchers(billing, -1)
        await super()._leave()

    def render_changed(self) -> str:
        membership = self.membership
        return render_to_string(
            "jobs/partials/overview_live.html",
            {
                "org": membership.organization,
                "overview": overview.overview(membership.organization),
                "can_write": membership.can(Role.MEMBER),
                "oob": True,
            },
        )

    async def overview_changed(self, message: dict) -> None:
        await self.changed()

    async def billing_changed(self, message: dict) -> None:
        await self.changed()

    async def billing_notice(self, message: dict) -> None:
        await self.changed()


class OrgJobsConsumer(_OrgConsumer, GroupConsumer):
    """The all-jobs list's socket, `ws/orgs/<slug>/jobs/?<the page's filters>`: each changed
    job's row is forwarded when it matches the page's filters, and a row that stopped
    matching (a job left the filtered state) is taken off the page."""

    filters: overview.JobFilters | None = None

    def _group_for(self) -> str:
        query = parse_qs(self.scope.get("query_string", b"").decode(errors="replace"))
        self.filters = overview.JobFilters.from_query({k: v[0] for k, v in query.items()})
        return org_jobs_group(self.membership.organization_id)

    async def org_jobs_push(self, message: dict) -> None:
        if not await self._still_allowed():
            return
        matches = self.filters is None or self.filters.matches(message.get("facts") or {})
        await self.send(text_data=message["html"] if matches else message["delete"])
