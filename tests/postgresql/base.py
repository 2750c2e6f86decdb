"""The test database's backend (config/test_settings.py): Django's PostgreSQL backend, but a
flush empties the tables with DELETE instead of TRUNCATE, and serialized rows come back a
model at a time (tests/postgresql/creation.py).

Every transactional test ends with a flush. TRUNCATE makes new files for each of the ~40
tables and their indexes: about 0.24 s a flush here, for tables that hold a test's few rows;
DELETE takes about 5 ms. Triggers (the ledger's immutability, foreign keys) are off for the
flush's own transaction (`session_replication_role = replica`, which needs a superuser, as the
suite's database user is; any other user gets TRUNCATE). Sequences are left as TRUNCATE
leaves them (a flush that resets them still truncates)."""

from __future__ import annotations

from django.db.backends.postgresql import base, operations

from tests.postgresql.creation import DatabaseCreation


class DatabaseOperations(operations.DatabaseOperations):
    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        if not tables or reset_sequences or not self._superuser():
            return super().sql_flush(
                style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade
            )
        deletes = [f"DELETE FROM {self.quote_name(table)};" for table in tables]
        return ["SET LOCAL session_replication_role = replica;", *deletes]

    def _superuser(self) -> bool:
        with self.connection.cursor() as cursor:
            cursor.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
            row = cursor.fetchone()
        return bool(row and row[0])


class DatabaseWrapper(base.DatabaseWrapper):
    ops_class = DatabaseOperations
    creation_class = DatabaseCreation
