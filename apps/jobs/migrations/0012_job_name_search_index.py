"""A trigram index for the all-jobs list's name search (`name__icontains` is
`UPPER(name) LIKE UPPER('%q%')` on PostgreSQL), so a search that matches few jobs reads
few rows instead of every job of the organization. PostgreSQL only, and only where the
`pg_trgm` extension can be created: elsewhere (SQLite for `make run`, a role without the
right) the search still works, reading the organization's rows."""

import logging

from django.db import DatabaseError, migrations, transaction

logger = logging.getLogger(__name__)

INDEX = "job_name_trgm"


def create(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    try:
        with transaction.atomic(using=schema_editor.connection.alias):
            schema_editor.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
            schema_editor.execute(
                f"CREATE INDEX IF NOT EXISTS {INDEX} ON jobs_job "
                "USING gin (UPPER(name::text) gin_trgm_ops)"
            )
    except DatabaseError:
        logger.warning("pg_trgm is not available: the job name search reads every row")


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP INDEX IF EXISTS {INDEX}")


class Migration(migrations.Migration):
    dependencies = [("jobs", "0011_dashboard_indexes")]

    operations = [migrations.RunPython(create, drop)]
