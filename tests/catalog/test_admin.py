"""Operators manage providers and their offers in the Django admin; prices show in dollars."""

from __future__ import annotations

import pytest

from apps.catalog.models import Accelerator, Offer
from apps.providers.models import Provider
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def superuser_client(client):
    client.force_login(UserFactory(is_staff=True, is_superuser=True))
    return client


def test_the_offer_list_shows_provider_accelerator_market_capacity_and_dollars(
    superuser_client, cpu_offer, make_offer
):
    make_offer("spotty", price=1_200_000, band=(800_000, 2_000_000), market="spot")
    page = superuser_client.get("/admin/catalog/offer/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "local (local)" in html
    assert "$0.10" in html
    assert "$1.20 (band $0.80 to $2.00)" in html
    assert "Spot" in html
    assert "On demand" in html


def test_the_offer_list_filters_by_market(superuser_client, cpu_offer, make_offer):
    make_offer("spotty", price=1_200_000, band=(800_000, 2_000_000), market="spot")
    page = superuser_client.get("/admin/catalog/offer/?market__exact=spot")
    assert [offer.provider.name for offer in page.context["cl"].result_list] == ["spotty"]


def test_a_provider_page_lists_its_offers_inline(superuser_client, cpu_offer):
    provider = Provider.objects.get(name="local")
    page = superuser_client.get(f"/admin/providers/provider/{provider.pk}/change/")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'name="offers-TOTAL_FORMS" value="1"' in html
    assert 'name="offers-0-capacity" value="2"' in html
    assert superuser_client.get("/admin/providers/provider/").status_code == 200


def test_an_offer_can_be_added_through_its_provider(superuser_client, cpu_offer):
    provider = Provider.objects.get(name="local")
    form = {
        "name": "local",
        "kind": "local",
        "config": "{}",
        "enabled": "on",
        "created_at_0": "2026-01-01",
        "created_at_1": "00:00:00",
        "offers-TOTAL_FORMS": "2",
        "offers-INITIAL_FORMS": "1",
        "offers-MIN_NUM_FORMS": "0",
        "offers-MAX_NUM_FORMS": "1000",
        "offers-0-id": str(cpu_offer.pk),
        "offers-0-provider": str(provider.pk),
        "offers-0-accelerator": str(cpu_offer.accelerator_id),
        "offers-0-market": "on_demand",
        "offers-0-capacity": "2",
        "offers-0-gpu_counts": "[1]",
        "offers-0-price_per_gpu_hour_micros": "100000",
        "offers-0-min_price_per_gpu_hour_micros": "100000",
        "offers-0-max_price_per_gpu_hour_micros": "100000",
        "offers-0-enabled": "on",
        "offers-1-provider": str(provider.pk),
        "offers-1-accelerator": str(Accelerator.objects.get(name="nvidia-l40s-48gb").pk),
        "offers-1-market": "on_demand",
        "offers-1-capacity": "4",
        "offers-1-gpu_counts": "[1, 2, 4]",
        "offers-1-price_per_gpu_hour_micros": "900000",
        "offers-1-min_price_per_gpu_hour_micros": "900000",
        "offers-1-max_price_per_gpu_hour_micros": "900000",
        "offers-1-enabled": "on",
    }
    response = superuser_client.post(f"/admin/providers/provider/{provider.pk}/change/", form)
    assert response.status_code == 302, response.content.decode()[:2000]
    added = Offer.objects.get(provider=provider, accelerator__name="nvidia-l40s-48gb")
    assert (added.capacity, added.gpu_counts, added.price_per_gpu_hour_micros) == (
        4,
        [1, 2, 4],
        900_000,
    )
    assert Offer.objects.filter(provider=provider).count() == 2
