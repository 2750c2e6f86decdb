"""SSH fixtures: a real sshd on loopback for the session (`sshd`), a fresh control-plane SSH
state directory per test (`ssh_state`), and an SSH provider on the sshd that placement picks
(`ssh_provider`; the seeded local provider is disabled for the test). Registered once for
the whole suite by tests/conftest.py, so one sshd serves every test of a session."""

from __future__ import annotations

import pytest

from apps.catalog.models import Accelerator, Offer
from apps.providers.models import Provider
from tests.providers.sshd import Sshd, make_sshd

FAR_PYTHON = "/usr/bin/python3"  # the far host's interpreter (the system's, not the venv's)


@pytest.fixture(scope="session")
def sshd(tmp_path_factory) -> Sshd:
    server = make_sshd(tmp_path_factory.mktemp("sshd"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def ssh_state(settings, tmp_path_factory):
    """The control plane's SSH state directory, fresh for the test (no shared connection
    left by an earlier test)."""
    settings.SSH_STATE_DIR = tmp_path_factory.mktemp("ssh-state")
    return settings.SSH_STATE_DIR


def ssh_config(sshd: Sshd, work_dir, **overrides) -> dict:
    return {
        "host": sshd.host,
        "port": sshd.port,
        "user": sshd.user,
        "host_key": sshd.host_key,
        "work_dir": str(work_dir),
        "python": FAR_PYTHON,
        "slots": 2,
        **overrides,
    }


@pytest.fixture
def ssh_provider(sshd, ssh_state, tmp_path, transactional_db) -> Provider:
    """An SSH provider on the test sshd with a `cpu` offer, the only enabled provider."""
    Provider.objects.filter(name="local").update(enabled=False)
    provider = Provider(
        name="ssh-loopback", kind=Provider.Kind.SSH, config=ssh_config(sshd, tmp_path / "far")
    )
    provider.set_credentials({"private_key": sshd.private_key})
    provider.save()
    Offer.objects.create(
        provider=provider,
        accelerator=Accelerator.objects.get(name="cpu"),
        gpu_counts=[1],
        capacity=2,
        price_per_gpu_hour_micros=100_000,
        min_price_per_gpu_hour_micros=100_000,
        max_price_per_gpu_hour_micros=100_000,
    )
    return provider
