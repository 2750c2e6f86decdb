"""A `kubernetes` provider on the emulated cluster (tests/providers/kube/), or on a real one.

`kubernetes_provider` makes the provider the only enabled one with a `cpu` offer, its
kubeconfig the emulated cluster's; its pods reach the control plane at `control_url`
(10.0.2.2, the host's loopback from a pod's own network, on the live server's port).

With TRAINYARD_TEST_KUBECONFIG set (a file), `real_cluster` gives that cluster instead:
the contract runs against it (docs/kubernetes.md says how); without it the tests that ask
for it are skipped, with the reason printed.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from apps.catalog.models import Accelerator, Offer
from apps.providers.models import Provider

POD_HOST = "10.0.2.2"  # the host's loopback, from a pod's slirp4netns network
REAL_KUBECONFIG_ENV = "TRAINYARD_TEST_KUBECONFIG"


def pod_url(url: str) -> str:
    """`url` (a server on this host's loopback) as a pod of the emulated cluster reaches it."""
    return f"http://{POD_HOST}:{urlsplit(url).port}"


def make_kubernetes_provider(
    kubeconfig: str, *, namespace: str, control_url: str, **config
) -> Provider:
    """The only enabled provider: kind kubernetes, a `cpu` offer of 4 slots."""
    Provider.objects.filter(enabled=True).update(enabled=False)
    provider = Provider(
        name="kube",
        kind=Provider.Kind.KUBERNETES,
        config={
            "namespace": namespace,
            "control_url": control_url,
            "termination_grace_s": 5,
            "shm_size": "64Mi",
            **config,
        },
    )
    provider.set_credentials({"kubeconfig": kubeconfig})
    provider.save()
    Offer.objects.create(
        provider=provider,
        accelerator=Accelerator.objects.get(name="cpu"),
        gpu_counts=[1],
        capacity=4,
        price_per_gpu_hour_micros=100_000,
        min_price_per_gpu_hour_micros=100_000,
        max_price_per_gpu_hour_micros=100_000,
    )
    return provider


@pytest.fixture
def kubernetes_provider(kube_cluster, live_server, settings, transactional_db) -> Provider:
    """The emulated cluster as the only enabled provider; its pods reach `live_server`."""
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, POD_HOST]
    return make_kubernetes_provider(
        kube_cluster.kubeconfig_yaml,
        namespace=kube_cluster.namespace,
        control_url=pod_url(live_server.url),
    )


@pytest.fixture
def real_kubernetes_provider(live_server, settings, transactional_db) -> str:
    """A real cluster as the only enabled provider (its kubeconfig from the file
    TRAINYARD_TEST_KUBECONFIG names), or a skip that says how to ask for one. Its pods reach
    this test run's live server at TRAINYARD_TEST_KUBE_CONTROL_URL (run pytest with
    `--liveserver 0.0.0.0:PORT`); they run TRAINYARD_TEST_KUBE_IMAGE (any image with
    python3). Returns the image."""
    path = os.environ.get(REAL_KUBECONFIG_ENV, "")
    control_url = os.environ.get("TRAINYARD_TEST_KUBE_CONTROL_URL", "")
    if not path or not control_url:
        pytest.skip(
            f"no real Kubernetes cluster named: set {REAL_KUBECONFIG_ENV} (a kubeconfig file) "
            "and TRAINYARD_TEST_KUBE_CONTROL_URL (where its pods reach this run's "
            "--liveserver) to run the backend contract against one (docs/kubernetes.md)"
        )
    settings.ALLOWED_HOSTS = ["*"]
    make_kubernetes_provider(
        Path(path).read_text(),
        namespace=os.environ.get("TRAINYARD_TEST_KUBE_NAMESPACE", "default"),
        control_url=control_url,
    )
    return os.environ.get("TRAINYARD_TEST_KUBE_IMAGE", "docker.io/library/python:3.11-slim")
