"""The health check each pooled PostgreSQL connection passes as it leaves the pool."""

from __future__ import annotations

from psycopg import Connection
from psycopg_pool import ConnectionPool


def check_and_sweep(conn: Connection) -> None:
    """Django's own check (an empty query); when it fails, every idle connection in the pool
    is checked too, and the broken ones replaced.

    A database restart or failover ends all of a process's connections at once. The pool
    finds that out one connection at a time, as requests take them, and waits longer after
    each broken one (1, 2, 4, 8 s...): with five or more ended connections idle, the next
    request outwaited the pool's 30 s timeout and answered 500. One sweep on the first
    failure leaves only live or fresh connections for the pool's next try (about a second
    later). psycopg sets `conn._pool` before it runs the check."""
    try:
        ConnectionPool.check_connection(conn)
    except Exception:
        pool = getattr(conn, "_pool", None)
        if isinstance(pool, ConnectionPool):
            pool.check()
        raise
