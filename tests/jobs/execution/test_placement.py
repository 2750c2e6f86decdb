"""`offers_with_free_capacity` (placement's choice of offers) and `quote`."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from apps.finetunes import payloads
from apps.jobs import services
from apps.jobs.execution import attempts, dispatch, placement
from apps.jobs.models import Attempt, Job
from apps.jobs.states import JobState
from apps.providers.models import Provider
from tests.jobs.helpers import make_job

pytestmark = pytest.mark.django_db

A100 = "nvidia-a100-80gb"


def _summary(offers) -> list[tuple[str, int, int, int]]:
    return [(o.provider.name, o.used, o.free, o.job_price_micros_hr) for o in offers]


def test_the_seeded_local_cpu_offer_has_both_slots_free(cpu_offer):
    offers = placement.offers_with_free_capacity(accelerator="cpu", gpu_count=1)
    assert offers == [cpu_offer]
    assert _summary(offers) == [("local", 0, 2, 100_000)]


def test_it_orders_cheapest_first_then_by_id(make_offer):
    dear = make_offer("dear", price=2_000_000)
    cheap_first = make_offer("cheap-a", price=1_500_000)
    cheap_second = make_offer("cheap-b", price=1_500_000)
    offers = placement.offers_with_free_capacity(accelerator=A100, gpu_count=2)
    assert offers == [cheap_first, cheap_second, dear]
    assert [o.job_price_micros_hr for o in offers] == [3_000_000, 3_000_000, 4_000_000]


def test_used_and_free_count_only_live_attempts(make_offer, hold):
    offer = make_offer("host", price=1_000_000, capacity=8)
    hold(offer, 2)
    hold(offer, 1)
    hold(offer, 4, ended=True)
    other = make_offer("other", price=1_000_000, capacity=8)
    hold(other, 8, ended=True)
    offers = placement.offers_with_free_capacity(accelerator=A100, gpu_count=1)
    assert _summary(offers) == [("host", 3, 5, 1_000_000), ("other", 0, 8, 1_000_000)]


def test_an_offer_without_room_for_the_whole_job_is_left_out(make_offer, hold):
    offer = make_offer("host", price=1_000_000, capacity=8)
    hold(offer, 4)
    hold(offer, 2)
    assert placement.offers_with_free_capacity(accelerator=A100, gpu_count=4) == []
    offers = placement.offers_with_free_capacity(accelerator=A100, gpu_count=2)
    assert _summary(offers) == [("host", 6, 2, 2_000_000)]


def test_the_price_ceiling_is_per_gpu_hour(make_offer):
    cheap = make_offer("cheap", price=1_000_000)
    make_offer("dear", price=1_000_001)
    at_ceiling = placement.offers_with_free_capacity(
        accelerator=A100, gpu_count=4, max_gpu_price_micros_hr=1_000_000
    )
    assert at_ceiling == [cheap]
    below = placement.offers_with_free_capacity(
        accelerator=A100, gpu_count=4, max_gpu_price_micros_hr=999_999
    )
    assert below == []
    assert len(placement.offers_with_free_capacity(accelerator=A100, gpu_count=4)) == 2


@pytest.mark.parametrize("in_sql", [True, False], ids=["sql", "python"])
def test_a_gpu_count_the_offer_does_not_rent_is_left_out(make_offer, monkeypatch, in_sql):
    monkeypatch.setattr(connection.features, "supports_json_field_contains", in_sql)
    eights = make_offer("eights", price=1_000_000, gpu_counts=[8])
    pairs = make_offer("pairs", "nvidia-rtx-4090-24gb", price=400_000, gpu_counts=[1, 2, 4, 8])
    assert placement.offers_with_free_capacity(accelerator=A100, gpu_count=1) == []
    assert placement.offers_with_free_capacity(accelerator=A100, gpu_count=8) == [eights]
    assert (
        placement.offers_with_free_capacity(accelerator="nvidia-rtx-4090-24gb", gpu_count=3) == []
    )
    assert placement.offers_with_free_capacity(accelerator="nvidia-rtx-4090-24gb", gpu_count=4) == [
        pairs
    ]


def test_disabled_offers_providers_and_other_accelerators_are_left_out(make_offer):
    live = make_offer("live", price=3_000_000)
    make_offer("off", price=1_000_000, enabled=False)
    make_offer("gone", price=1_000_000)
    Provider.objects.filter(name="gone").update(enabled=False)
    make_offer("h100s", "nvidia-h100-80gb", price=1_000_000)
    assert placement.offers_with_free_capacity(accelerator=A100, gpu_count=1) == [live]


def test_it_is_one_query(make_offer, hold, django_assert_num_queries):
    hold(make_offer("a", price=1_000_000), 2)
    make_offer("b", price=2_000_000)
    with django_assert_num_queries(1):
        offers = placement.offers_with_free_capacity(accelerator=A100, gpu_count=1)
        names = [(o.provider.name, o.accelerator.name) for o in offers]
    assert names == [("a", A100), ("b", A100)]


def test_a_quote_spans_the_bands_of_the_available_offers(make_offer, hold):
    make_offer("spot", price=1_200_000, band=(800_000, 2_000_000), market="spot")
    make_offer("steady", price=1_900_000)
    hold(make_offer("full", price=100_000, band=(50_000, 100_000), capacity=1), 1)
    before = timezone.now()
    result = placement.quote(accelerator=A100, gpu_count=1)
    assert (result.available, result.price_min_micros_hr, result.price_max_micros_hr) == (
        True,
        800_000,
        2_000_000,
    )
    assert before <= result.observed_at <= before + timedelta(seconds=5)


def test_an_unobtainable_quote_has_no_prices(cpu_offer, hold):
    hold(cpu_offer)
    hold(cpu_offer)
    result = placement.quote(accelerator="cpu", gpu_count=1)
    assert (result.available, result.price_min_micros_hr, result.price_max_micros_hr) == (
        False,
        None,
        None,
    )


# -- tenancy: the local host runtime is single-tenant ----------------------------------------


def _local(config: dict) -> None:
    """The seeded local provider with this config, single-tenant unless it says otherwise
    (the suite's settings open host providers to every organization)."""
    Provider.objects.filter(name="local").update(config={"multi_tenant": False, **config})


def test_a_single_tenant_host_takes_a_second_organization_only_once_the_first_is_done(
    org, other_org
):
    _local({"runtime": "host"})
    first = make_job(org)
    assert dispatch.allocate(first.pk) is not None

    second = make_job(other_org)
    assert dispatch.allocate(second.pk) is None  # a free slot, but another tenant's work on it
    assert Job.objects.get(pk=second.pk).state == JobState.REQUESTED
    same_org = make_job(org)
    assert dispatch.allocate(same_org.pk) is not None  # its own organization may share it

    for job in (first, same_org):
        attempts.end_attempt(Attempt.objects.get(job=job), reason="exit_code_0", exit_code=0)
    assert dispatch.allocate(second.pk) is not None


def test_an_operator_may_open_a_host_to_several_organizations(org, other_org):
    _local({"runtime": "host", "multi_tenant": True})
    assert dispatch.allocate(make_job(org).pk) is not None
    assert dispatch.allocate(make_job(other_org).pk) is not None


def test_a_container_runtime_takes_several_organizations_at_once(org, other_org):
    _local({"runtime": "podman"})
    assert dispatch.allocate(make_job(org).pk) is not None
    assert dispatch.allocate(make_job(other_org).pk) is not None


@pytest.mark.parametrize(
    ("model", "dataset", "placed_on_podman"),
    [
        ("/srv/models/llama", "tatsu-lab/alpaca", False),
        ("Qwen/Qwen2.5-0.5B", "./data/train.jsonl", False),
        ("Qwen/Qwen2.5-0.5B", "tatsu-lab/alpaca", True),
    ],
)
def test_a_finetune_reading_host_paths_goes_only_to_a_single_tenant_provider(
    org, project, model, dataset, placed_on_podman
):
    config = {"model": model, "dataset": dataset, "dataset_format": "alpaca"}
    payload = payloads.job_payload(name="ft", project_id=project.public_id, config=config)
    job = services.job_create(organization=org, payload=payload, kind=Job.Kind.FINETUNE).job

    _local({"runtime": "podman"})
    assert (dispatch.allocate(job.pk) is not None) is placed_on_podman
    if not placed_on_podman:
        _local({"runtime": "host"})
        assert dispatch.allocate(job.pk) is not None
