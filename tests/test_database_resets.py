"""What the suite's database backend (tests/postgresql) does between transactional tests: a
flush leaves every table empty, immutable ledger rows included, and the rows migrations made
come back exactly as they were serialized."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.core.management import call_command
from django.db import DataError, connection, transaction

from apps.billing import ledger
from apps.billing.models import Transfer
from apps.catalog.models import Accelerator
from apps.providers.models import Provider
from tests.factories import OrganizationFactory
from tests.postgresql.base import retried_on_deadlock

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


def _deadlock_victim_once(calls: list[int]):
    """Work that PostgreSQL itself fails as a deadlock's victim (SQLSTATE 40P01) the first
    time, and that answers 1 after."""

    def work() -> int:
        calls.append(1)
        with transaction.atomic(), connection.cursor() as cursor:
            if len(calls) == 1:
                cursor.execute(
                    "DO $$ BEGIN RAISE EXCEPTION 'deadlock detected' "
                    "USING ERRCODE = '40P01'; END $$"
                )
            cursor.execute("SELECT 1")
            return cursor.fetchone()[0]

    return work


def test_a_flush_or_reload_chosen_as_a_deadlocks_victim_is_tried_again_and_nothing_else_is():
    calls: list[int] = []
    assert retried_on_deadlock(_deadlock_victim_once(calls)) == 1
    assert len(calls) == 2

    def broken() -> None:
        calls.append(1)
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1/0")

    calls.clear()
    with pytest.raises(DataError):
        retried_on_deadlock(broken)
    assert len(calls) == 1


def test_every_transactional_test_reloads_the_serialized_rows(request):
    """A transactional test without `serialized_rollback` ends with a flush that runs
    post_migrate, which makes the content types again under new ids; every later serialized
    test of that worker then fails to reload its rows (duplicate content types), a cascade of
    errors in a clean-clone run. Each test that takes the database in a transaction
    (`transaction=True`, `transactional_db`, `live_server`) must say `serialized_rollback`."""
    offenders = []
    for item in request.session.items:
        marker = item.get_closest_marker("django_db")
        names = set(getattr(item, "fixturenames", ()))
        transactional = bool(names & {"transactional_db", "live_server"}) or bool(
            marker and marker.kwargs.get("transaction")
        )
        if transactional and not (marker and marker.kwargs.get("serialized_rollback")):
            offenders.append(item.nodeid)
    assert offenders == []
