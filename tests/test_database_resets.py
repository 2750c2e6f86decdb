"""What the suite's database backend (tests/postgresql) does between transactional tests: a
flush leaves every table empty, immutable ledger rows included, and the rows migrations made
come back exactly as they were serialized."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.core.management import call_command
from django.db import connection

from apps.billing import ledger
from apps.billing.models import Transfer
from apps.catalog.models import Accelerator
from apps.providers.models import Provider
from tests.factories import OrganizationFactory

pytestmark = pytest.mark.django_db(transaction=True, serialized_rollback=True)


def _row_counts() -> dict[str, int]:
    counts = {}
    with connection.cursor() as cursor:
        for table in connection.introspection.django_table_names(only_existing=True):
            cursor.execute(f"SELECT count(*) FROM {connection.ops.quote_name(table)}")
            counts[table] = cursor.fetchone()[0]
    return counts


def test_a_flush_empties_every_table_and_the_serialized_rows_come_back_as_they_were():
    assert connection.vendor == "postgresql"
    migrated = connection._test_serialized_contents
    org = OrganizationFactory()
    ledger.grant(organization=org, amount_micros=5_000_000, idempotency_key="reset-test")
    assert Transfer.objects.exists()  # a row its trigger refuses to delete, outside a flush

    # As TransactionTestCase flushes after each test.
    call_command(
        "flush",
        verbosity=0,
        interactive=False,
        reset_sequences=False,
        inhibit_post_migrate=True,
    )
    assert {table: n for table, n in _row_counts().items() if n} == {}

    connection.creation.deserialize_db_from_string(migrated)
    assert connection.creation.serialize_db_to_string() == migrated
    # Over rows still there (as before a worker's first test), they are put back as they were.
    Permission.objects.update(name="changed")
    connection.creation.deserialize_db_from_string(migrated)
    assert connection.creation.serialize_db_to_string() == migrated
    assert Accelerator.objects.exists() and Provider.objects.filter(name="local").exists()
    assert not Transfer.objects.exists()
