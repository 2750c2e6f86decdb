"""A job for an accelerator no enabled offer could run now holds at the catalog's reference
price, never $0 (review T3-10: an empty wallet got 201 for an H200 job, held nothing, and
could run unreserved once an offer came back)."""

from __future__ import annotations

import importlib

import pytest
from django.apps import apps as django_apps

from apps.billing import holds, ledger
from apps.billing.models import Transfer
from apps.catalog.models import Accelerator
from apps.jobs.execution import dispatch
from apps.jobs.models import Job
from tests.factories import OrganizationFactory
from tests.jobs.helpers import job_body

pytestmark = pytest.mark.django_db
H200 = "nvidia-h200-141gb"
H200_REFERENCE = 5_000_000  # $5 per GPU-hour, from catalog migration 0005


def _post(api, accelerator: str = H200, gpu_count: int = 2, key: str = "one", **limits):
    body = job_body(
        compute={"accelerator": accelerator, "gpu_count": gpu_count, "ephemeral_disk_gb": 1},
        limits=limits,
    )
    return api.post("/api/v1/compute/jobs", body, format="json", HTTP_IDEMPOTENCY_KEY=key)


def test_the_catalog_migration_gives_the_seeded_accelerators_a_reference_price():
    prices = dict(Accelerator.objects.values_list("name", "reference_price_per_gpu_hour_micros"))
    assert prices[H200] == H200_REFERENCE
    assert prices["cpu"] == 100_000
    assert all(price and price > 0 for price in prices.values())


def test_a_job_with_no_offer_holds_two_hours_at_the_reference_price_and_keeps_it_when_placed(
    org, api_client_for, make_offer
):
    response = _post(api_client_for(org))
    assert response.status_code == 201, response.content
    job = Job.objects.get(public_id=response.json()["id"])
    (hold,) = Transfer.objects.filter(job=job, code=Transfer.Code.HOLD)
    assert (hold.state, hold.amount_micros) == ("pending", 2 * 2 * H200_REFERENCE)  # $20

    # An offer appears: the job runs with its money reserved.
    offer = make_offer("h200s", H200, price=4_000_000)
    offer.provider.kind = "local"
    offer.provider.save()
    assert dispatch.allocate(job.pk) is not None
    assert holds.held_for_job(job.pk) == 20_000_000


def test_an_empty_wallet_cannot_submit_a_job_no_offer_could_run(api_client_for):
    broke = OrganizationFactory(credits_usd=0)
    response = _post(api_client_for(broke))
    assert response.status_code == 402
    assert response.json()["error"]["type"] == "insufficient_balance"
    assert "$20.00" in response.json()["error"]["message"]
    assert not Job.objects.filter(organization=broke).exists()
    assert ledger.balance(broke.pk) == ledger.Balance(0, 0)


def test_offers_all_disabled_hold_at_the_reference_price_too(org, api_client_for, make_offer):
    make_offer("h200s", H200, price=9_000_000, enabled=False)  # down for maintenance
    response = _post(api_client_for(org), gpu_count=1)
    assert response.status_code == 201
    job = Job.objects.get(public_id=response.json()["id"])
    assert holds.held_for_job(job.pk) == 2 * H200_REFERENCE


def test_no_offer_and_no_reference_price_needs_a_ceiling_else_422_no_price(org, api_client_for):
    Accelerator.objects.create(name="bare", display_name="Bare", vendor="x", gpu_counts=[1])
    api = api_client_for(org)
    response = _post(api, accelerator="bare", gpu_count=1)
    assert response.status_code == 422
    error = response.json()["error"]
    assert (error["type"], error["param"]) == ("no_price", "limits.max_price_usd_hr")
    assert not Job.objects.filter(organization=org).exists()

    named = _post(api, accelerator="bare", gpu_count=1, key="two", max_price_usd_hr=3)
    assert named.status_code == 201
    job = Job.objects.get(public_id=named.json()["id"])
    assert holds.held_for_job(job.pk) == 6_000_000  # two hours at its own ceiling


def test_the_data_migration_fills_only_what_is_missing():
    migration = importlib.import_module("apps.catalog.migrations.0005_accelerator_reference_price")
    Accelerator.objects.filter(name=H200).update(reference_price_per_gpu_hour_micros=None)
    Accelerator.objects.filter(name="cpu").update(reference_price_per_gpu_hour_micros=123)
    migration.seed(django_apps, None)
    prices = dict(Accelerator.objects.values_list("name", "reference_price_per_gpu_hour_micros"))
    assert (prices[H200], prices["cpu"]) == (H200_REFERENCE, 123)
