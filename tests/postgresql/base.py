"""The test database's backend (config/test_settings.py): Django's PostgreSQL backend, but a
flush empties the tables with DELETE instead of TRUNCATE, and serialized rows come back a
model at a time (tests/postgresql/creation.py).

Every transactional test ends with a flush. TRUNCATE makes new files for each of the ~40
tables and their indexes: about 0.24 s a flush here, for tables that hold a test's few rows;
DELETE takes about 5 ms. Triggers (the ledger's immutability, foreign keys) are off for the
flush's own transaction (`session_replication_role = replica`, which needs a superuser, as the
suite's database user is; any other user gets TRUNCATE). Sequences are left as TRUNCATE
leaves them (a flush that resets them still truncates).

A flush (or the rows' reload) that PostgreSQL picks as a deadlock's victim is tried again: a
runner or stack process of the test that just ended may still be finishing a request on the
same rows, and a flush given up leaves the last test's rows for every later test of the
worker (each then fails to reload the serialized rows)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from django.db import OperationalError
from django.db.backends.postgresql import base, operations

from tests.postgresql.creation import DatabaseCreation

T = TypeVar("T")
DEADLOCK = "40P01"
DEADLOCK_TRIES = 5


def retried_on_deadlock(work: Callable[[], T]) -> T:
    """`work()` (one transaction), again after a short pause when it was a deadlock's
    victim, at most DEADLOCK_TRIES times."""
    for attempt in range(1, DEADLOCK_TRIES + 1):
        try:
            return work()
        except OperationalError as exc:
            if getattr(exc.__cause__, "sqlstate", None) != DEADLOCK or attempt == DEADLOCK_TRIES:
                raise
            time.sleep(0.2 * attempt)
    raise AssertionError("unreachable")


class DatabaseOperations(operations.DatabaseOperations):
    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        if not tables or reset_sequences or not self._superuser():
            return super().sql_flush(
                style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade
            )
        deletes = [f"DELETE FROM {self.quote_name(table)};" for table in tables]
        return ["SET LOCAL session_replication_role = replica;", *deletes]

    def execute_sql_flush(self, sql_list) -> None:
        retried_on_deadlock(lambda: super(DatabaseOperations, self).execute_sql_flush(sql_list))

    def _superuser(self) -> bool:
        with self.connection.cursor() as cursor:
            cursor.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
            row = cursor.fetchone()
        return bool(row and row[0])


class DatabaseWrapper(base.DatabaseWrapper):
    ops_class = DatabaseOperations
    creation_class = DatabaseCreation
