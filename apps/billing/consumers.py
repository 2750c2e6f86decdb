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

from channels.db import database_sync_to_async

from apps.accounts.models import Membership
from apps.accounts.tenancy import SESSION_ORG_KEY
from apps.billing.live import billing_group
from apps.billing.web import partials
from apps.core.live import CoalescingConsumer

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


class BillingConsumer(CoalescingConsumer):
    organization_id: int | None = None
    coalesce_s = COALESCE_S

    async def _allowed(self, user) -> bool:
        slug = self.scope.get("url_route", {}).get("kwargs", {}).get("org_slug")
        found = await _organization_id(user, slug, self.scope.get("session"))
        if found is None or (self.organization_id is not None and found != self.organization_id):
            return False
        self.organization_id = found
        return True

    def _group_for(self) -> str:
        return billing_group(self.organization_id)

    def render_changed(self) -> str:
        return partials.render_changed(self.organization_id)

    async def billing_changed(self, message: dict) -> None:
        await self.changed()

    async def billing_notice(self, message: dict) -> None:
        if not await self._still_allowed():
            return
        html = await database_sync_to_async(partials.render_notice)(
            self.organization_id, message.get("notice")
        )
        if html:
            await self.send(text_data=html)
