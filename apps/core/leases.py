"""Leases that last exactly as long as the process holding them: PostgreSQL session locks.

Some work must not run twice at once for the same row, yet must be taken up again when the
process doing it dies: the dispatch of a job (placing it and starting its runner) is one. A
timeout cannot tell a slow holder (pulling a large image) from a dead one. A PostgreSQL
advisory lock can: it belongs to the holder's database session, so it is released when the
holder lets go or when its connection closes, a worker killed mid-task included.

`lease(namespace, key)` tries once, never waits, and says whether it got the lease; it lets go
on leaving the block, so a pooled connection goes back to its pool without it. On other
databases (SQLite under `make run`, one worker process) every lease is granted. A lease
needs the session to stay the holder's: PostgreSQL directly or a session-pooling proxy, never
a transaction-pooling one.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import DatabaseError, connection

# One number per kind of work, so the same row's leases for different work never collide.
DISPATCH = 1
HUB_PUBLISH = 2  # a succeeded fine-tune's adapter, published to the hub

_INT4 = 2**31


@contextmanager
def lease(namespace: int, key: int) -> Iterator[bool]:
    """Hold the lease on (`namespace`, `key`) for the block if no live session holds it;
    yields whether this one does. Keys are taken modulo 2**31 (PostgreSQL's two-key form
    takes 32-bit integers): ids that far apart share a lease, which only delays one of them."""
    if connection.vendor != "postgresql":
        yield True
        return
    keys = [namespace, key % _INT4]
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", keys)
        held = cursor.fetchone()[0]
    try:
        yield held
    finally:
        if held:
            _release(keys)


def _release(keys: list[int]) -> None:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s, %s)", keys)
    except DatabaseError:
        connection.close()  # a session that broke holds nothing once closed
