"""The ledger audit and the immutability of transfers on PostgreSQL: a cached balance that
drifts from its transfers is found (and logged by the hourly task), and a transfer cannot be
changed or deleted, even by a queryset that skips the model."""

from __future__ import annotations

import logging

import pytest
from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F

from apps.billing import ledger
from apps.billing.models import Account, Transfer
from apps.billing.tasks import audit_ledger
from config.celery import app as celery_app

pytestmark = pytest.mark.django_db


@pytest.fixture
def drifted(org):
    """The wallet's cached posted credits off by $5 for the test, put back after it (the
    suite checks every test leaves a ledger that audits clean)."""
    wallet = ledger.accounts_for(org.pk)["wallet"]
    Account.objects.filter(pk=wallet.pk).update(posted_credits=F("posted_credits") + 5_000_000)
    yield wallet
    Account.objects.filter(pk=wallet.pk).update(posted_credits=F("posted_credits") - 5_000_000)


def test_a_clean_ledger_audits_clean(org, other_org):
    assert ledger.audit() == []
    assert audit_ledger() == 0


def test_the_audit_finds_a_cached_balance_that_drifted(drifted):
    assert ledger.audit() == [
        ledger.Mismatch(
            account_id=drifted.pk,
            column="posted_credits",
            cached=1_005_000_000,
            recomputed=1_000_000_000,
        )
    ]


def test_the_task_logs_an_error_per_mismatch_and_returns_the_count(drifted, caplog):
    with caplog.at_level(logging.ERROR, logger="apps.billing.tasks"):
        assert audit_ledger() == 1
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert errors[0] == (
        f"ledger audit: account {drifted.pk} posted_credits is 1005000000 cached "
        "but 1000000000 from its transfers"
    )


def test_beat_runs_the_audit_every_interval_and_the_worker_knows_it():
    entry = settings.CELERY_BEAT_SCHEDULE["audit-ledger"]
    assert (entry["task"], entry["schedule"]) == (
        "billing.audit_ledger",
        settings.LEDGER_AUDIT_INTERVAL_S,
    )
    celery_app.loader.import_default_modules()
    assert "billing.audit_ledger" in celery_app.tasks


def test_postgresql_refuses_to_update_or_delete_a_transfer(org):
    grants = Transfer.objects.filter(organization=org, code="grant")
    with pytest.raises(IntegrityError, match="immutable"), transaction.atomic():
        grants.update(amount_micros=1)
    with pytest.raises(IntegrityError, match="immutable"), transaction.atomic():
        grants.delete()
    transfer = grants.get()
    transfer.memo = "edited"
    with pytest.raises(IntegrityError, match="immutable"), transaction.atomic():
        transfer.save()
    assert grants.get().amount_micros == 1_000_000_000
