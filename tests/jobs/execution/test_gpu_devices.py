"""GPU devices per attempt (issue 36, T3-8): placement gives each GPU attempt on a host the
lowest device indices no live attempt there holds, under the provider's lock, and the
launch request carries them. On the real database; the launch itself is in
tests/providers/test_gpu_devices.py."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, transaction

from apps.catalog.models import Accelerator, Offer
from apps.jobs.execution import attempts, dispatch
from apps.jobs.models import Attempt, Job, JobEvent, LogLine
from apps.jobs.states import JobState
from apps.providers.models import Provider
from tests.jobs.helpers import make_job

pytestmark = pytest.mark.django_db

A100 = "nvidia-a100-80gb"
H100 = "nvidia-h100-80gb"


def gpu_job(org, count: int = 1, accelerator: str = A100) -> Job:
    compute = {"accelerator": accelerator, "gpu_count": count, "ephemeral_disk_gb": 1}
    return make_job(org, compute=compute)


def host(name: str, *, kind: str = "local", config: dict | None = None) -> Provider:
    """A host that takes several organizations at once (a container runtime): no tenancy
    lock is what orders its placements."""
    return Provider.objects.create(name=name, kind=kind, config=config or {"runtime": "podman"})


def offer_on(provider: Provider, capacity: int, accelerator: str = A100, price=100_000) -> Offer:
    return Offer.objects.create(
        provider=provider,
        accelerator=Accelerator.objects.get(name=accelerator),
        gpu_counts=[1, 2, 4],
        capacity=capacity,
        price_per_gpu_hour_micros=price,
        min_price_per_gpu_hour_micros=price,
        max_price_per_gpu_hour_micros=price,
    )


def devices_of(job: Job) -> list[int]:
    return Attempt.objects.get(job=job, ended_at=None).gpu_devices


def end(job: Job) -> None:
    attempts.end_attempt(Attempt.objects.get(job=job, ended_at=None), reason="exit_code_0")


def test_two_one_gpu_attempts_on_a_two_gpu_host_get_devices_0_and_1_and_a_third_waits(org):
    offer_on(host("box"), capacity=2)
    first, second, third = gpu_job(org), gpu_job(org), gpu_job(org)

    assert dispatch.allocate(first.pk).gpu_devices == [0]
    assert dispatch.allocate(second.pk).gpu_devices == [1]
    assert dispatch.allocate(third.pk) is None
    assert Job.objects.get(pk=third.pk).state == JobState.REQUESTED
    assert sorted(Attempt.objects.filter(ended_at=None).values_list("gpu_devices", flat=True)) == [
        [0],
        [1],
    ]
    line = LogLine.objects.filter(job=second, source="system").first().message
    assert line.startswith(f"allocated box: {A100} x1 (GPU 1) at ")
    allocated = JobEvent.objects.get(job=second, type="provider_allocated")
    assert allocated.data["gpu_devices"] == [1]


def test_a_released_attempts_device_is_given_to_the_next_one(org):
    offer_on(host("box"), capacity=2)
    first, second, third = gpu_job(org), gpu_job(org), gpu_job(org)
    dispatch.allocate(first.pk)
    dispatch.allocate(second.pk)

    end(first)
    assert dispatch.allocate(third.pk).gpu_devices == [0]
    assert devices_of(second) == [1]


def test_a_multi_gpu_attempt_gets_the_lowest_free_indices_even_with_a_gap(org):
    offer_on(host("box"), capacity=4)
    one, two, three = gpu_job(org), gpu_job(org), gpu_job(org)
    assert dispatch.allocate(one.pk).gpu_devices == [0]
    assert dispatch.allocate(two.pk).gpu_devices == [1]
    assert dispatch.allocate(three.pk).gpu_devices == [2]
    end(two)

    pair = gpu_job(org, count=2)
    assert dispatch.allocate(pair.pk).gpu_devices == [1, 3]
    assert dispatch.allocate(gpu_job(org).pk) is None  # all four held


def test_the_offers_of_one_host_share_its_numbering(org):
    box = host("box")
    offer_on(box, capacity=1, accelerator=A100)
    offer_on(box, capacity=1, accelerator=H100)
    a100, h100 = gpu_job(org, accelerator=A100), gpu_job(org, accelerator=H100)

    assert dispatch.allocate(a100.pk).gpu_devices == [0]
    assert dispatch.allocate(h100.pk).gpu_devices == [1]


def test_each_host_numbers_its_own_gpus(org):
    offer_on(host("left"), capacity=1, price=100_000)
    offer_on(host("right"), capacity=1, price=200_000)
    first, second = gpu_job(org), gpu_job(org)

    assert (dispatch.allocate(first.pk).provider.name, devices_of(first)) == ("left", [0])
    assert (dispatch.allocate(second.pk).provider.name, devices_of(second)) == ("right", [0])


def test_an_attempt_placed_before_devices_were_numbered_holds_none_and_is_counted_by_slot(org):
    """An attempt live across the migration has no devices: its slot still counts."""
    offer = offer_on(host("box"), capacity=2)
    dispatch.allocate(gpu_job(org).pk)
    Attempt.objects.update(gpu_devices=[])

    assert dispatch.allocate(gpu_job(org).pk).gpu_devices == [0]
    assert dispatch.allocate(gpu_job(org).pk) is None  # the offer is full by count
    assert offer.attempts.filter(ended_at=None).count() == 2


def test_cpu_attempts_and_slurm_attempts_get_no_devices(org):
    cpu = make_job(org)  # the seeded local cpu offer
    assert dispatch.allocate(cpu.pk).gpu_devices == []

    offer_on(host("cluster", kind="slurm", config={"work_dir": "/shared"}), capacity=2)
    on_slurm = gpu_job(org)
    attempt = dispatch.allocate(on_slurm.pk)
    assert (attempt.provider.name, attempt.gpu_devices) == ("cluster", [])
    line = LogLine.objects.filter(job=on_slurm, source="system").first().message
    assert "(GPU" not in line


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_a_placement_waits_for_another_on_the_same_host_and_never_shares_its_device(org):
    """Another placement on the host's other offer, caught between choosing device 0 and
    committing: this one waits for it (the provider's lock) and takes device 1."""
    box = host("box")
    offer_on(box, capacity=1, accelerator=A100)
    h100_offer = offer_on(box, capacity=1, accelerator=H100)
    other, job = gpu_job(org, accelerator=H100), gpu_job(org, accelerator=A100)
    results: list[Attempt | None] = []

    def place() -> None:
        results.append(dispatch.allocate(job.pk))
        connection.close()

    placing = threading.Thread(target=place)
    with transaction.atomic():
        Provider.objects.select_for_update(no_key=True).get(pk=box.pk)
        Attempt.objects.create(
            job=other,
            number=1,
            provider=box,
            offer=h100_offer,
            accelerator=H100,
            gpu_count=1,
            gpu_devices=[0],
        )
        placing.start()
        placing.join(timeout=1.0)
        assert placing.is_alive()  # waiting for the host, not reading its devices yet
    placing.join(timeout=30)
    assert results[0] is not None and results[0].gpu_devices == [1]
    held = Attempt.objects.filter(ended_at=None).values_list("gpu_devices", flat=True)
    assert sorted(held) == [[0], [1]]
