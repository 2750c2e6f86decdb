"""`GET /api/v1/compute/market/ladder`: the offers that could run a job, cheapest first,
with their free capacity and the price that wins now."""

import pytest

pytestmark = pytest.mark.django_db
A100 = "nvidia-a100-80gb"


@pytest.fixture
def api(api_client_for, org):
    return api_client_for(org)


def ladder(api, **params):
    return api.get("/api/v1/compute/market/ladder", params)


def test_it_lists_the_offers_by_price_and_the_cheapest_with_room_wins(api, make_offer, hold):
    full = make_offer("full", A100, price=1_000_000, capacity=2)
    make_offer("roomy", A100, price=2_000_000, band=(1_500_000, 3_000_000))
    make_offer("spot", A100, price=500_000, market="spot")
    make_offer("singles", A100, price=100_000, gpu_counts=[1])
    hold(full, 2)

    body = ladder(api, accelerator=A100, gpu_count=2).json()
    assert [(r["provider"], r["free_gpus"], r["available"]) for r in body["data"]] == [
        ("full", 0, False),
        ("roomy", 8, True),
    ]
    assert body["data"][1]["price_usd_hr"] == 4.0
    assert body["data"][1]["band_per_gpu_usd_hr"] == {"min": 1.5, "max": 3.0}
    assert body["price_to_win_per_gpu_usd_hr"] == 2.0

    preemptible = ladder(api, accelerator=A100, gpu_count=2, priority_class="preemptible").json()
    assert [r["provider"] for r in preemptible["data"]] == ["spot", "full", "roomy"]
    assert preemptible["price_to_win_per_gpu_usd_hr"] == 0.5


def test_when_every_offer_is_full_nothing_wins(api, make_offer, hold):
    hold(make_offer("only", A100, price=1_000_000, capacity=1), 1)
    body = ladder(api, accelerator=A100, gpu_count=1).json()
    assert body["price_to_win_per_gpu_usd_hr"] is None
    assert [r["available"] for r in body["data"]] == [False]


@pytest.mark.parametrize(
    ("params", "param"),
    [
        ({"gpu_count": 1}, "accelerator"),
        ({"accelerator": A100, "gpu_count": "many"}, "gpu_count"),
        ({"accelerator": A100, "gpu_count": 1, "priority_class": "vip"}, "priority_class"),
        ({"accelerator": A100, "gpu_count": 1, "color": "red"}, "color"),
    ],
)
def test_bad_parameters_are_400_naming_the_parameter(api, params, param):
    response = ladder(api, **params)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == param
