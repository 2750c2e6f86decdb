"""Writing the same fields of many rows in one statement.

Django's `bulk_update` builds a `CASE WHEN id = ... THEN ...` expression per field with a
branch per row: every branch is an expression Django resolves and compiles in Python, so
updating a hundred rows cost more CPU than the statement took in PostgreSQL (a third of a
reconcile pass at a thousand live attempts). On PostgreSQL `update_rows` sends the values as
one array per field instead and joins them in (`UPDATE ... FROM unnest(...)`): the same
statement whatever the row count. Elsewhere (SQLite under `make run`) it is `bulk_update`.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db import connection, models


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
