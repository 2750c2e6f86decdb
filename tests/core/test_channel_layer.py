"""The channel layer as deployed (channels_redis on the real Redis, `CHANNEL_LAYERS`): a
page's socket that gets no push for longer than the layer's blocking pop keeps waiting, and
gets the next push. Before its socket timeout was set, redis-py 8's default (5 s, the pop's
own length) ended that wait with an error: the consumer died without disconnecting, its
socket slot was never given back, and the page reconnected every 5 s until its user hit the
socket cap."""

from __future__ import annotations

import asyncio

import pytest
from channels.layers import get_channel_layer

pytestmark = pytest.mark.anyio


async def test_a_quiet_channel_outwaits_the_blocking_pop_and_still_gets_its_push():
    layer = get_channel_layer()
    channel = await layer.new_channel()

    # Longer than one blocking pop: what raised redis' TimeoutError here is now a plain wait.
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(layer.receive(channel), timeout=layer.brpop_timeout + 1.5)

    await layer.send(channel, {"type": "job.push", "html": "<p>after the quiet</p>"})
    message = await asyncio.wait_for(layer.receive(channel), timeout=5)
    assert message == {"type": "job.push", "html": "<p>after the quiet</p>"}
