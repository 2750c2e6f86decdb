"""The channel layer as deployed (channels_redis on the real Redis, `CHANNEL_LAYERS`): a
page's socket that gets no push for longer than the layer's blocking pop keeps waiting, and
gets the next push; a page that goes away ends its receive whenever the cancel lands. With
redis-py 8's default socket timeout (5 s, the pop's own length) the first failed: the
consumer died without disconnecting, its socket slot was never given back, and the page
reconnected every 5 s until its user hit the socket cap. With any socket timeout the second
failed (see below)."""

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


async def test_a_receive_cancelled_at_any_moment_ends():
    """A page that goes away cancels its consumer's receive. On Python 3.11 a cancel that
    lands while redis-py sends under `asyncio.wait_for` (as it does with a socket timeout)
    was swallowed: the receive went on popping every 5 s forever and its consumer never
    ended. Cancelled after each number of loop turns in turn, every receive must end."""
    layer = get_channel_layer()
    for turns in range(40):
        channel = await layer.new_channel()
        receiving = asyncio.ensure_future(layer.receive(channel))
        for _ in range(turns):
            await asyncio.sleep(0)
        receiving.cancel()
        done, _ = await asyncio.wait([receiving], timeout=layer.brpop_timeout + 2)
        assert done, f"a receive cancelled after {turns} loop turns never ended"
