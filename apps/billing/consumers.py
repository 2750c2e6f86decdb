"""The Billing page's websocket, `ws/billing/<org>/` (or `ws/billing/` for the organization
the session last opened). Any member of the organization may listen; the socket cap,
refusal codes and periodic re-check are the shared ones (`apps.core.live.GroupConsumer`).

The ledger sends `billing.changed` (no payload) to `billing.org.<id>` after each write
commits (`apps.billing.live`). A busy organization writes a transfer per job per billed
minute, so a socket coalesces: it renders the cards and budget bars at once, then at most
once per `COALESCE_S` however many changes arrive meanwhile, and always once more after the
last one, so the page ends on the truth. Rendering is per socket, but only for sockets that
are open; nothing is rendered for an organization nobody watches. `billing.notice` adds the
notice to the page's list.
"""

from __future__ import annotations

import asyncio
import contextlib

from channels.db import database_sync_to_async

from apps.accounts.models import Membership
from apps.accounts.tenancy import SESSION_ORG_KEY
from apps.billing.live import billing_group
from apps.billing.web import partials
from apps.core.live import GroupConsumer

COALESCE_S = 0.5


@database_sync_to_async
def _organization_id(user, org_slug: str | None, session) -> int | None:
    """The organization the socket watches, if `user` is an active member of it: the one
    in the path, else the one the session last opened, else the user's first (as
    `apps.accounts.tenancy.default_membership` chooses for `/billing/`)."""
    memberships = Membership.objects.filter(user=user, user__is_active=True)
    slug = org_slug or (session.get(SESSION_ORG_KEY) if session is not None else None)
    if slug:
        memberships = memberships.filter(organization__slug=slug)
    else:
        memberships = memberships.order_by("created_at", "id")
    return memberships.values_list("organization_id", flat=True).first()


class BillingConsumer(GroupConsumer):
    organization_id: int | None = None
    _dirty: bool = False
    _renderer: asyncio.Task | None = None

    async def _allowed(self, user) -> bool:
        slug = self.scope.get("url_route", {}).get("kwargs", {}).get("org_slug")
        found = await _organization_id(user, slug, self.scope.get("session"))
        if found is None or (self.organization_id is not None and found != self.organization_id):
            return False
        self.organization_id = found
        return True

    def _group_for(self) -> str:
        return billing_group(self.organization_id)

    async def billing_changed(self, message: dict) -> None:
        if not await self._still_allowed():
            return
        self._dirty = True
        if self._renderer is None or self._renderer.done():
            self._renderer = asyncio.ensure_future(self._render_while_dirty())

    async def _render_while_dirty(self) -> None:
        while self._dirty and self.group is not None:
            self._dirty = False
            html = await database_sync_to_async(partials.render_changed)(self.organization_id)
            if self.group is None:
                return
            await self.send(text_data=html)
            await asyncio.sleep(COALESCE_S)

    async def billing_notice(self, message: dict) -> None:
        if not await self._still_allowed():
            return
        html = await database_sync_to_async(partials.render_notice)(
            self.organization_id, message.get("notice")
        )
        if html:
            await self.send(text_data=html)

    async def disconnect(self, code: int) -> None:
        renderer, self._renderer = self._renderer, None
        if renderer is not None and not renderer.done():
            renderer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renderer
        await super().disconnect(code)
