"""An endpoint page's websocket, `ws/endpoints/<ep_id>/`. Any active member of the
endpoint's organization may listen; anyone else (another organization's endpoint, or no
such endpoint: the same answer) is refused with 4403. The socket cap, the other refusal
codes and the periodic re-check are the shared ones (`apps.core.live.GroupConsumer`).

The services send `endpoint.changed` (no payload) to `serving.endpoint.<pk>` after a
revision flips, loads or fails, or the endpoint stops (`apps.serving.live`). Each socket
answers with the page's live partials (the state and current-revision block, the revisions
table, the promotions history) as out-of-band swaps, rendered from the same named partials
the page's first render used. A sync can write several changes within a second, so a socket
coalesces as the Billing page's does: it renders at once, then at most once per
`COALESCE_S` however many changes arrive meanwhile, and always once more after the last one,
so the page ends on the truth.
"""

from __future__ import annotations

from channels.db import database_sync_to_async

from apps.core.live import CoalescingConsumer
from apps.serving.live import endpoint_group
from apps.serving.models import Endpoint
from apps.serving.web import partials

COALESCE_S = 0.5


@database_sync_to_async
def _visible_endpoint(user, public_id: str) -> int | None:
    """The endpoint's primary key, if `user` is an active member of its organization."""
    # One filter() call: the membership and its user's activity are the same join.
    return (
        Endpoint.objects.filter(
            public_id=public_id,
            organization__memberships__user=user,
            organization__memberships__user__is_active=True,
        )
        .values_list("pk", flat=True)
        .first()
    )


class EndpointConsumer(CoalescingConsumer):
    endpoint_id: int | None = None
    coalesce_s = COALESCE_S

    async def _allowed(self, user) -> bool:
        public_id = self.scope["url_route"]["kwargs"]["endpoint_id"]
        found = await _visible_endpoint(user, public_id)
        if found is None or (self.endpoint_id is not None and found != self.endpoint_id):
            return False
        self.endpoint_id = found
        return True

    def _group_for(self) -> str:
        return endpoint_group(self.endpoint_id)

    def render_changed(self) -> str:
        return partials.render_changed(self.endpoint_id)

    async def endpoint_changed(self, message: dict) -> None:
        await self.changed()
