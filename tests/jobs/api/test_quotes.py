"""`POST /api/v1/compute/catalog/quotes`: a live observation of price and availability that
reserves nothing. A valid request is always 200; unobtainable is `available: false`."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.apps import apps
from django.utils import timezone
from rest_framework.test import APIClient

from apps.accounts.models import Organization, Role
from apps.providers.models import Provider

pytestmark = pytest.mark.django_db

URL = "/api/v1/compute/catalog/quotes"
A100 = "nvidia-a100-80gb"
UNAVAILABLE = {"available": False, "price_usd_hr": None, "expires_at": None}


def body(accelerator: str = "cpu", gpu_count: int = 1, **extra) -> dict:
    return {
        "resource_type": "job",
        "compute": {"accelerator": accelerator, "gpu_count": gpu_count, "ephemeral_disk_gb": 100},
        **extra,
    }


def ask(client: APIClient, payload: object) -> tuple[int, dict]:
    response = client.post(URL, payload, format="json")
    return response.status_code, response.json()


def without_time(answer: dict) -> dict:
    return {key: value for key, value in answer.items() if key != "observed_at"}


@pytest.fixture
def client(api_client_for, org) -> APIClient:
    return api_client_for(org)


def test_the_seeded_cpu_offer_quotes_ten_cents(client, cpu_offer):
    before = timezone.now()
    status, answer = ask(client, body())
    assert status == 200
    assert without_time(answer) == {
        "available": True,
        "price_usd_hr": {"min": 0.1, "max": 0.1},
        "expires_at": None,
    }
    observed = datetime.fromisoformat(answer["observed_at"])
    assert before <= observed <= before + timedelta(seconds=5)


def test_the_reference_body_with_container_and_access_is_accepted(client, cpu_offer):
    payload = body(container={"image": "python:3.12-slim"}, access={"ssh": True})
    status, answer = ask(client, payload)
    assert (status, answer["available"]) == (200, True)


def test_a_spot_band_is_scaled_by_gpu_count(client, make_offer):
    make_offer("spotty", price=1_200_000, band=(800_000, 2_000_000), market="spot")
    status, answer = ask(client, body(A100, 4))
    assert status == 200
    assert answer["price_usd_hr"] == {"min": 3.2, "max": 8.0}


def test_the_range_runs_from_the_cheapest_to_the_dearest_provider(client, make_offer, hold):
    make_offer("budget", price=1_100_000, band=(900_000, 1_600_000), market="spot")
    make_offer("steady", price=1_890_000)
    make_offer("premium", price=2_490_000)
    # Cheaper or dearer, but not obtainable: outside the range.
    hold(make_offer("full", price=500_000, capacity=2), 2)
    make_offer("paused", price=400_000, enabled=False)
    make_offer("retired", price=9_000_000)
    Provider.objects.filter(name="retired").update(enabled=False)
    make_offer("eights-only", price=300_000, gpu_counts=[8])
    status, answer = ask(client, body(A100, 2))
    assert status == 200
    assert without_time(answer) == {
        "available": True,
        "price_usd_hr": {"min": 1.8, "max": 4.98},
        "expires_at": None,
    }


def test_with_both_cpu_slots_held_the_quote_is_unavailable_but_200(client, cpu_offer, hold):
    hold(cpu_offer)
    hold(cpu_offer)
    status, answer = ask(client, body())
    assert status == 200
    assert without_time(answer) == UNAVAILABLE
    assert datetime.fromisoformat(answer["observed_at"])


def test_an_ended_attempt_gives_its_slot_back(client, cpu_offer, hold):
    hold(cpu_offer)
    hold(cpu_offer, ended=True)
    hold(cpu_offer, ended=True)
    status, answer = ask(client, body())
    assert (status, answer["available"], answer["price_usd_hr"]) == (
        200,
        True,
        {"min": 0.1, "max": 0.1},
    )


def test_a_disabled_offer_is_not_offered(client, cpu_offer):
    cpu_offer.enabled = False
    cpu_offer.save(update_fields=["enabled"])
    status, answer = ask(client, body())
    assert (status, without_time(answer)) == (200, UNAVAILABLE)


def test_a_disabled_provider_is_not_offered(client, cpu_offer):
    Provider.objects.filter(name="local").update(enabled=False)
    status, answer = ask(client, body())
    assert (status, without_time(answer)) == (200, UNAVAILABLE)


def test_an_accelerator_nobody_offers_is_unavailable(client):
    status, answer = ask(client, body("nvidia-h200-141gb", 8))
    assert (status, without_time(answer)) == (200, UNAVAILABLE)


def test_a_quote_creates_and_changes_nothing(client, cpu_offer, hold):
    hold(cpu_offer)
    counts = {model: model.objects.count() for model in apps.get_models()}
    attempt = cpu_offer.attempts.get()
    assert ask(client, body())[0] == 200
    assert ask(client, body())[0] == 200
    assert {model: model.objects.count() for model in apps.get_models()} == counts
    cpu_offer.refresh_from_db()
    assert (cpu_offer.capacity, cpu_offer.enabled) == (2, True)
    assert cpu_offer.attempts.get() == attempt
    assert attempt.ended_at is None


def test_a_viewer_may_quote(api_client_for, org, cpu_offer):
    status, answer = ask(api_client_for(org, role=Role.VIEWER), body())
    assert (status, answer["available"]) == (200, True)


@pytest.mark.parametrize(
    ("payload", "param"),
    [
        (body("nvidia-b200-192gb"), "compute.accelerator"),
        (body(A100, 3), "compute.gpu_count"),
        (body("cpu", 2), "compute.gpu_count"),
        (body("cpu", 0), "compute.gpu_count"),
        (
            {"resource_type": "job", "compute": {"accelerator": "cpu", "gpu_count": 1}},
            "compute.ephemeral_disk_gb",
        ),
        (body() | {"compute": {**body()["compute"], "disk": 5}}, "compute.disk"),
        (body() | {"resource_type": "endpoint"}, "resource_type"),
        ({"compute": body()["compute"]}, "resource_type"),
        ({"resource_type": "job"}, "compute"),
        (body(container={}), "container.image"),
        (body(access={"ssh": "perhaps"}), "access.ssh"),
        (body(limits={"max_cost_usd": 5}), "limits"),
    ],
    ids=[
        "unknown-accelerator",
        "a100-does-not-come-in-3",
        "cpu-comes-in-1",
        "zero-gpus",
        "missing-disk",
        "unknown-compute-field",
        "wrong-resource-type",
        "missing-resource-type",
        "missing-compute",
        "container-without-image",
        "ssh-not-a-bool",
        "unknown-top-level-field",
    ],
)
def test_an_invalid_request_is_400_naming_the_field(client, cpu_offer, payload, param):
    status, answer = ask(client, payload)
    assert status == 400
    assert answer["error"]["type"] == "invalid_request"
    assert answer["error"]["param"] == param
    assert answer["error"]["message"]


def test_the_unknown_accelerator_message_points_at_the_catalog(client):
    _, answer = ask(client, body("nvidia-b200-192gb"))
    assert answer["error"] == {
        "type": "invalid_request",
        "message": "Unknown accelerator 'nvidia-b200-192gb'; see the catalog.",
        "param": "compute.accelerator",
    }


def test_a_body_that_is_not_an_object_is_400(client):
    status, answer = ask(client, [body()])
    assert status == 400
    assert (answer["error"]["type"], answer["error"]["param"]) == ("invalid_request", None)


def test_without_compute_enabled_it_is_403_tenant_disabled(client, org, cpu_offer):
    Organization.objects.filter(pk=org.pk).update(compute_enabled=False)
    status, answer = ask(client, body())
    assert status == 403
    assert answer["error"]["type"] == "tenant_disabled"


def test_without_credentials_it_is_401(cpu_offer):
    response = APIClient().post(URL, body(), format="json")
    assert response.status_code == 401
    assert response.json()["error"]["type"] == "unauthenticated"
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_get_is_405(client):
    response = client.get(URL)
    assert response.status_code == 405
    assert response.json()["error"]["type"] == "method_not_allowed"


def test_the_schema_describes_the_quote_operation(client):
    schema = client.get("/api/schema/?format=json").json()
    operation = schema["paths"][URL]["post"]
    assert operation["summary"] == "Quote price and availability"
    request_ref = operation["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    response_ref = operation["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    assert (request_ref, response_ref) == (
        "#/components/schemas/QuoteIn",
        "#/components/schemas/QuoteOut",
    )
    quote_out = schema["components"]["schemas"]["QuoteOut"]
    assert sorted(quote_out["properties"]) == [
        "available",
        "expires_at",
        "observed_at",
        "price_usd_hr",
    ]
