"""Holds at submit: a job reserves two hours of itself at its price ceiling, in the same
transaction as its creation, or it is not created."""

from __future__ import annotations

import threading

import pytest
from django.db import connection
from rest_framework.test import APIClient

from apps.billing import ledger
from apps.billing.models import Budget, Transfer
from apps.jobs import services
from apps.jobs.models import Job
from tests.billing.api_helpers import spend
from tests.factories import OrganizationFactory
from tests.jobs.helpers import job_body

pytestmark = pytest.mark.django_db
A100 = "nvidia-a100-80gb"


def post(api, body, key="key-1"):
    return api.post("/api/v1/compute/jobs", body, format="json", HTTP_IDEMPOTENCY_KEY=key)


def eight_gpus(**limits) -> dict:
    return job_body(
        compute={"accelerator": A100, "gpu_count": 8, "ephemeral_disk_gb": 10}, limits=limits
    )


def holds_of(org) -> list[Transfer]:
    return list(Transfer.objects.filter(organization=org, code="hold").order_by("id"))


@pytest.fixture
def a100(make_offer):
    return make_offer("a100s", A100, price=2_000_000, band=(1_000_000, 4_000_000))


def test_a_balance_short_of_two_hours_at_the_ceiling_is_402_naming_both_amounts(
    api_client_for, a100
):
    org = OrganizationFactory(credits_usd="79.99")
    response = post(api_client_for(org), eight_gpus(max_price_usd_hr=5))
    assert response.status_code == 402
    body = response.json()["error"]
    assert body["type"] == "insufficient_balance"
    assert "$80.00" in body["message"] and "$79.99" in body["message"]
    assert not Job.objects.filter(organization=org).exists()
    assert holds_of(org) == []


def test_with_enough_the_job_holds_it_and_ending_the_job_voids_the_hold(api_client_for, a100):
    org = OrganizationFactory(credits_usd=80)
    api = api_client_for(org)
    response = post(api, eight_gpus(max_price_usd_hr=5))
    assert response.status_code == 201
    (hold,) = holds_of(org)
    assert (hold.state, hold.amount_micros) == ("pending", 80_000_000)
    assert hold.job.public_id == response.json()["id"]
    assert ledger.balance(org.pk).available_micros == 0

    # Nothing left for a second job.
    second = post(api, eight_gpus(max_price_usd_hr=5), key="key-2")
    assert second.status_code == 402

    api.post(f"/api/v1/compute/jobs/{response.json()['id']}/terminate")
    assert Job.objects.get(public_id=response.json()["id"]).state == "terminated"
    void = Transfer.objects.get(pending=hold)
    assert (void.state, void.amount_micros) == ("voided", 80_000_000)
    assert ledger.balance(org.pk) == ledger.Balance(80_000_000, 0)


def test_the_hold_is_capped_by_max_cost(api_client_for, org, a100):
    assert (
        post(api_client_for(org), eight_gpus(max_price_usd_hr=5, max_cost_usd=3)).status_code == 201
    )
    assert [h.amount_micros for h in holds_of(org)] == [3_000_000]


def test_without_a_ceiling_the_job_is_held_at_the_dearest_offer_that_could_run_it(
    api_client_for, org, a100, make_offer
):
    make_offer("dearer", A100, price=3_000_000, band=(3_000_000, 6_000_000))
    make_offer("spot", A100, price=500_000, band=(100_000, 9_000_000), market="spot")
    make_offer("too-big", A100, price=9_000_000, gpu_counts=[1])
    assert post(api_client_for(org), eight_gpus()).status_code == 201
    # 2 h x $6 (the dearest on-demand band ceiling; spot is not for a standard job) x 8.
    assert [h.amount_micros for h in holds_of(org)] == [96_000_000]


def test_a_retried_create_never_holds_twice(api_client_for, org):
    api = api_client_for(org)
    first, again = post(api, job_body(), key="same"), post(api, job_body(), key="same")
    assert (first.status_code, again.status_code) == (201, 200)
    assert len(holds_of(org)) == 1


def test_a_ceiling_under_every_offer_is_422_bid_too_low_naming_the_price_that_clears(
    api_client_for, org, a100, make_offer
):
    make_offer("other", A100, price=1_500_000, band=(1_200_000, 1_500_000))
    api = api_client_for(org)
    response = post(api, eight_gpus(max_price_usd_hr=0.99))
    assert response.status_code == 422
    error = response.json()["error"]
    assert (error["type"], error["param"]) == ("bid_too_low", "limits.max_price_usd_hr")
    assert "$1.00" in error["message"]
    assert not Job.objects.exists()
    # At the lowest band floor it is accepted (and waits for the price to fall).
    assert post(api, eight_gpus(max_price_usd_hr=1), key="key-2").status_code == 201


def test_a_spent_blocking_budget_refuses_new_jobs_with_budget_exceeded(
    api_client_for, org, project
):
    Budget.objects.create(
        public_id="bud_test", organization=org, period="month", limit_micros=1, action="block"
    )
    spend(org, 1, project=project)
    response = post(api_client_for(org), job_body())
    assert response.status_code == 402
    assert response.json()["error"]["type"] == "budget_exceeded"
    assert not Job.objects.exists()


def test_an_alert_budget_refuses_nothing(org):
    Budget.objects.create(
        public_id="bud_alert", organization=org, period="day", limit_micros=1, action="alert"
    )
    spend(org, 5)
    result = services.job_create(organization=org, payload=job_body(), idempotency_key="k")
    assert result.created


# serialized_rollback restores the migrations' seed rows (the catalog) that a flush removes.
@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_fifty_threads_with_one_idempotency_key_make_one_job_and_one_hold():
    from apps.accounts import services as account_services

    org = OrganizationFactory()
    _, full_key = account_services.api_key_create(organization=org, name="race")
    barrier = threading.Barrier(50)
    codes: list[int] = []

    def submit():
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {full_key}")
        barrier.wait()
        try:
            codes.append(post(client, job_body(), key="one-key").status_code)
        finally:
            connection.close()

    threads = [threading.Thread(target=submit) for _ in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(codes) == [200] * 49 + [201]
    assert Job.objects.count() == 1
    assert len(holds_of(org)) == 1
