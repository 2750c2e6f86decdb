"""Writing the same fields of many rows in one statement.

Django's `bulk_update` builds a `CASE WHEN id = ... THEN ...` expression per field with a
branch per row: every branch is an expression Django resolves and compiles in Python, so
updating a hundred rows cost more CPU than the statement took in PostgreSQL (a third of a
reconcile pass at a thousand live attempts). On PostgreSQL `update_rows` sends the values as
one array per field instead and joins them in (`UPDATE ... FROM unnest(...)`): the same
statement whatever the row count. Elsewhere (SQLite under `make run`) it is `bulk_update`.

`insert_rows` is the same for new rows, in place of `bulk_create`, which builds a model
instance per row and prepares every value of every field in Python: for the hundred metric
points and samples of a log batch, more time than the INSERT took. Its arrays go in binary,
through psycopg's own cursor, so Django's query log (`CaptureQueriesContext`) does not see it.
"""

from __future__ import annotations

from collections.abc import Sequence

import psycopg
from django.db import connection, models

# Fields whose Python values psycopg sends as they are: nothing to prepare per value.
_SENT_AS_IS = (
    models.IntegerField,
    models.FloatField,
    models.BooleanField,
    models.CharField,
    models.TextField,
    models.ForeignKey,
)


def update_rows(objs: Sequence[models.Model], fields: Sequence[str]) -> int:
    """Write `fields` of each of `objs` (instances of one model, saved before) to its row,
    in one statement. Returns how many rows it updated."""
    if not objs:
        return 0
    model = type(objs[0])
    if connection.vendor != "postgresql":
        return model.objects.bulk_update(objs, fields)
    meta = model._meta
    columns = [meta.pk, *(meta.get_field(name) for name in fields)]
    arrays = [
        [column.get_db_prep_save(getattr(obj, column.attname), connection) for obj in objs]
        for column in columns
    ]
    qn = connection.ops.quote_name
    names = [qn(column.column) for column in columns]
    casts = ", ".join(f"%s::{column.db_type(connection)}[]" for column in columns)
    assignments = ", ".join(f"{name} = v.{name}" for name in names[1:])
    table = qn(meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET {assignments} FROM unnest({casts}) AS v({', '.join(names)}) "
            f"WHERE {table}.{names[0]} = v.{names[0]}",
            arrays,
        )
        return cursor.rowcount


def insert_rows(
    model: type[models.Model], fields: Sequence[str], rows: Sequence[Sequence]
) -> list[int]:
    """Insert one row of `model` per item of `rows` (the values of `fields`, in that order;
    a foreign key by its id, as `job` for `job_id`) in one statement. Every other field
    takes its default. Returns the new rows' ids, in the order of `rows`."""
    if not rows:
        return []
    meta = model._meta
    given = [meta.get_field(name) for name in fields]
    defaulted = [
        field
        for field in meta.concrete_fields
        if field not in given and not field.primary_key and field.has_default()
    ]
    if connection.vendor != "postgresql":
        objs = model.objects.bulk_create(
            model(**{field.attname: value for field, value in zip(given, row, strict=True)})
            for row in rows
        )
        return [obj.pk for obj in objs]
    arrays = [
        [row[index] for row in rows]
        if isinstance(field, _SENT_AS_IS)
        else [field.get_db_prep_save(row[index], connection) for row in rows]
        for index, field in enumerate(given)
    ]
    for field in defaulted:
        arrays.append([field.get_db_prep_save(field.get_default(), connection)] * len(rows))
    columns = [*given, *defaulted]
    qn = connection.ops.quote_name
    names = ", ".join(qn(field.column) for field in columns)
    casts = ", ".join(f"%b::{field.db_type(connection)}[]" for field in columns)
    connection.ensure_connection()
    # psycopg's own cursor sends the arrays in binary (%b), where Django's spells every
    # value out in the SQL text: half the statement's time for a hundred rows.
    # Its errors are raised as Django's (DataError, IntegrityError), as from any query.
    with connection.wrap_database_errors, psycopg.Cursor(connection.connection) as cursor:
        # Rows are inserted, and take ids from the sequence, in the order unnest gives them.
        cursor.execute(
            f"INSERT INTO {qn(meta.db_table)} ({names}) SELECT * FROM unnest({casts}) "
            f"RETURNING {qn(meta.pk.column)}",
            arrays,
        )
        return sorted(row[0] for row in cursor.fetchall())
