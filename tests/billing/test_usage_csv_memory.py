"""The usage CSV streams: 20,000 jobs' rows go out in chunks read from a server-side cursor,
and the peak memory of sending them all stays far below what holding the rows would take."""

from __future__ import annotations

import sys
import tracemalloc
from datetime import timedelta

import pytest
from django.db import connection
from django.db.models import F
from django.utils import timezone

from apps.billing import ledger, reports
from apps.billing.models import Account, Meter, Transfer
from apps.jobs.models import Attempt, Job
from tests.billing.api_helpers import billed_job, roomy_offer

pytestmark = pytest.mark.django_db
ROWS = 20_000


@pytest.fixture(autouse=True)
def offer(make_offer):
    return roomy_offer(make_offer)


def _copy(model, template_pk: int, source: str, **columns: str) -> None:
    """Insert a copy of one `model` row for each row of the SQL `source` (aliased `s`), with
    `columns` set to SQL expressions over `s`; every other column as the template has it."""
    table = model._meta.db_table
    names = [f.column for f in model._meta.concrete_fields if not f.primary_key]
    values = [columns.get(name, f"t.{connection.ops.quote_name(name)}") for name in names]
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} ({', '.join(map(connection.ops.quote_name, names))}) "
            f"SELECT {', '.join(values)} FROM {table} t, ({source}) s WHERE t.id = %s",
            [template_pk],
        )


def _bulk_usage(org, count: int) -> None:
    """`count` more billed jobs, copied in SQL from one billed through the real services
    (its attempt, meter and usage transfer too), and the wallet's and usage account's
    cached sums moved by their total so the ledger still balances."""
    job = billed_job(org, minutes=1, name="template")
    attempt = Attempt.objects.get(job=job)
    meter = Meter.objects.get(attempt=attempt)
    usage = Transfer.objects.get(attempt=attempt, code="usage")
    _copy(
        Job,
        job.pk,
        f"SELECT g FROM generate_series(1, {count}) g",
        public_id="'job_bulk' || s.g",
        name="'bulk job number ' || s.g",
        idempotency_key="NULL",
    )
    bulk_jobs = "SELECT id, public_id, name FROM jobs_job WHERE public_id LIKE 'job_bulk%%'"
    _copy(Attempt, attempt.pk, bulk_jobs, job_id="s.id", token_nonce="md5(s.public_id)")
    _copy(
        Meter,
        meter.pk,
        "SELECT a.id, a.job_id, j.public_id, j.name FROM jobs_attempt a "
        "JOIN jobs_job j ON j.id = a.job_id WHERE j.public_id LIKE 'job_bulk%%'",
        attempt_id="s.id",
        job_id="s.job_id",
        resource_id="s.public_id",
        resource_name="s.name",
    )
    _copy(
        Transfer,
        usage.pk,
        "SELECT m.attempt_id, m.job_id FROM billing_meter m WHERE m.resource_id LIKE 'job_bulk%%'",
        attempt_id="s.attempt_id",
        job_id="s.job_id",
        idempotency_key="'bulk:' || s.attempt_id",
    )
    total = usage.amount_micros * count
    accounts = ledger.accounts_for(org.pk)
    Account.objects.filter(pk=accounts["wallet"].pk).update(
        posted_debits=F("posted_debits") + total
    )
    Account.objects.filter(pk=accounts["usage"].pk).update(
        posted_credits=F("posted_credits") + total
    )


def test_twenty_thousand_rows_stream_in_flat_memory(api_client_for, org):
    _bulk_usage(org, ROWS)
    api = api_client_for(org)

    response = api.get("/api/v1/compute/usage.csv")  # the rows are read as it streams
    assert response.status_code == 200
    tracemalloc.start()
    try:
        lines = sent = 0
        for chunk in response.streaming_content:
            lines += chunk.count(b"\n")
            sent += len(chunk)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert lines == ROWS + 2  # the header, the template job and its copies
    # Holding every row would take ROWS x row_size; streaming holds one chunk of them.
    row_size = _row_size(org)
    assert peak < ROWS * row_size / 4, f"peak {peak} bytes, {row_size} bytes a row"


def _row_size(org) -> int:
    """What one report row takes in memory: its dict and its values."""
    window = reports.Window(timezone.now() - timedelta(days=1), timezone.now())
    row = next(reports.usage_rows(org.pk, window))
    return sys.getsizeof(row) + sum(sys.getsizeof(v) for v in row.values())
