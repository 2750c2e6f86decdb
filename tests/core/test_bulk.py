"""`update_rows`: the given fields of many rows in one statement, and nothing else.
`insert_rows`: new rows in one statement, the rest of their fields at their defaults."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from apps.billing.models import Meter
from apps.core.bulk import insert_rows, update_rows
from apps.jobs.execution import dispatch
from apps.jobs.models import MetricPoint
from tests.jobs.helpers import make_job

pytestmark = pytest.mark.django_db


COMPUTE = {"accelerator": "nvidia-a100-80gb", "gpu_count": 1, "ephemeral_disk_gb": 10}


@pytest.fixture(autouse=True)
def roomy(make_offer):
    offer = make_offer("roomy-cloud", "nvidia-a100-80gb", price=600_000, capacity=10)
    offer.provider.config = {"multi_tenant": True, "isolation": "users"}
    offer.provider.save()


def _meters(org, count: int) -> list[Meter]:
    """`count` attempts allocated, each with its meter (0 minutes, open)."""
    for _ in range(count):
        assert dispatch.allocate(make_job(org, compute=COMPUTE).pk) is not None
    return list(Meter.objects.filter(organization=org).order_by("pk"))


def test_it_writes_each_rows_own_values_in_one_statement_and_leaves_the_rest(org):
    first, second, untouched = _meters(org, 3)
    ended = timezone.now() - timedelta(minutes=3)
    first.billed_minutes, first.posted_micros, first.ended_at = 7, 70_000, ended
    second.billed_minutes, second.posted_micros = 2, 20_000
    untouched.billed_minutes = 99  # changed in memory, not passed

    with CaptureQueriesContext(connection) as queries:
        updated = update_rows([first, second], ["billed_minutes", "posted_micros", "ended_at"])

    assert (updated, len(queries)) == (2, 1)
    rows = Meter.objects.order_by("pk").values_list("billed_minutes", "posted_micros", "ended_at")
    assert list(rows) == [(7, 70_000, ended), (2, 20_000, None), (0, 0, None)]


def test_it_writes_a_null_over_a_value(org):
    [meter] = _meters(org, 1)
    Meter.objects.filter(pk=meter.pk).update(ended_at=timezone.now())
    meter.ended_at = None

    update_rows([meter], ["ended_at"])

    assert Meter.objects.get(pk=meter.pk).ended_at is None


def test_it_does_nothing_for_no_rows():
    with CaptureQueriesContext(connection) as queries:
        assert update_rows([], ["billed_minutes"]) == 0
    assert len(queries) == 0


def test_insert_rows_stores_each_rows_values_and_defaults_in_order(org):
    job = make_job(org)
    before = timezone.now()
    rows = [
        (job.pk, 2, 7, 1.5, None, 2e-4, {"grad_norm": 0.5, "nested": {"a": [1, 2]}}),
        (job.pk, 2, 8, None, 0.25, None, {}),
        (job.pk, 2, 9, float("nan"), None, None, {"note": "ünïcode"}),
    ]
    fields = ("job", "attempt", "step", "loss", "epoch", "learning_rate", "extra")

    ids = insert_rows(MetricPoint, fields, rows)

    stored = list(MetricPoint.objects.filter(pk__in=ids).order_by("pk"))
    assert [point.pk for point in stored] == ids == sorted(ids)
    assert [(p.step, p.loss, p.epoch, p.learning_rate, p.extra) for p in stored[:2]] == [
        (7, 1.5, None, 2e-4, {"grad_norm": 0.5, "nested": {"a": [1, 2]}}),
        (8, None, 0.25, None, {}),
    ]
    assert stored[2].loss != stored[2].loss  # NaN kept
    assert stored[2].extra == {"note": "ünïcode"}
    assert all(p.job_id == job.pk and p.attempt == 2 for p in stored)
    # Fields not given take their defaults.
    assert all(p.superseded is False and p.created_at >= before for p in stored)


def test_insert_rows_does_nothing_for_no_rows():
    with CaptureQueriesContext(connection) as queries:
        assert insert_rows(MetricPoint, ("job", "step"), []) == []
    assert len(queries) == 0
