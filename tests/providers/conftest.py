"""Fixtures of the provider tests: a real Slurm cluster for the session, and a `slurm`
provider on it that placement picks."""

from __future__ import annotations

import pytest

from apps.catalog.models import Accelerator, Offer
from apps.providers.models import Provider
from tests.providers.slurm_cluster import SlurmCluster, available


@pytest.fixture(scope="session")
def slurm_cluster():
    """munged, slurmctld and slurmd of this session (skipped where they cannot run)."""
    why = available()
    if why:
        pytest.skip(f"no Slurm cluster here: {why}")
    cluster = SlurmCluster()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def slurm_provider(slurm_cluster, tmp_path):
    """A `slurm` provider on the session's cluster with the only enabled `cpu` offer, so
    the test's jobs are placed there. Needs database access (a django_db test)."""
    work_dir = tmp_path / "slurm-work"
    work_dir.mkdir()
    provider = Provider.objects.create(
        name="slurm",
        kind=Provider.Kind.SLURM,
        config={
            "work_dir": str(work_dir),
            "slurm_conf": str(slurm_cluster.conf),
            "partition": "low",
            "slots": 8,
        },
    )
    Offer.objects.filter(accelerator__name="cpu").update(enabled=False)
    Offer.objects.create(
        provider=provider,
        accelerator=Accelerator.objects.get(name="cpu"),
        gpu_counts=[1],
        capacity=8,
        price_per_gpu_hour_micros=100_000,
        min_price_per_gpu_hour_micros=100_000,
        max_price_per_gpu_hour_micros=100_000,
    )
    yield provider
    # Nothing of the test's keeps running into the next one.
    slurm_cluster.cancel_all()
