"""Shared personas: an organization with a member, a viewer and an admin, and an outsider who
belongs to another organization. `api_client_for` authenticates with a real API key."""

from __future__ import annotations

import gc
import importlib
import logging
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis
from django.apps import apps as django_apps
from django.conf import settings
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from apps.accounts import services
from apps.accounts.models import Role
from apps.catalog.models import Accelerator, Offer
from apps.jobs.models import Attempt, Job
from apps.jobs.states import TERMINAL_STATES
from apps.providers.models import Provider
from tests import parallel
from tests.artefacts import cached
from tests.containers import ensure_test_image
from tests.factories import MembershipFactory, OrganizationFactory, ProjectFactory, UserFactory
from tests.integration.stack import Stack

# Real daemons for the provider tests, each started once per session when a test needs it:
# an sshd on loopback, a single-node Slurm cluster (munged, slurmctld, slurmd) and an
# emulated Kubernetes cluster whose pods are podman containers.
from tests.providers.kube.fixtures import _kube_cluster_session, kube_cluster  # noqa: F401
from tests.providers.kube_provider import (  # noqa: F401
    kubernetes_provider,
    real_kubernetes_provider,
)
from tests.providers.slurm_cluster import slurm_cluster, slurm_provider  # noqa: F401
from tests.providers.ssh_fixtures import ssh_provider, ssh_state, sshd  # noqa: F401

# The compute API client and its `compute_org`/`api` fixtures, shared by the integration and
# serving tests; the command line run in-process against the test's app (`cli_transport`).
pytest_plugins = ["tests.compute_api", "tests.cli_in_process"]


def pytest_configure(config):
    config.pluginmanager.register(parallel.TimingRecorder(config), "trainyard-test-times")
    config.pluginmanager.register(parallel.Order(), "trainyard-test-order")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Groups for pytest-xdist, from the fixtures each test uses (tests/parallel.py); before
    xdist's own hook turns the marks into work units."""
    parallel.assign_groups(items)


def pytest_collection_finish(session):
    """What collection built (every test item, Django, the plugins) lives as long as the
    worker: out of the garbage collector's sight, each full collection during the run scans
    only what tests make; and the youngest generation is collected every 20,000 objects,
    not 700 (tests make many short-lived ORM objects). Measured on 938 in-process tests:
    11% less CPU."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 50, 100)


@pytest.fixture(scope="session", autouse=True)
def _worker_resources(request, django_db_modify_db_settings):
    """What this worker holds, recorded for the guard test (tests/test_parallel.py)."""
    from django.db import connection

    parallel.register(
        request.config,
        redis_url=settings.REDIS_URL,
        test_database=connection.creation._get_test_db_name(),
        var_dir=str(settings.VAR_DIR),
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test that used the live stack shows the tail of its processes' logs (a 500's
    traceback is in the web server's), so a failure on CI can be read without a rerun."""
    report = yield
    stack = item.funcargs.get("stack") if hasattr(item, "funcargs") else None
    if report.failed and stack is None and "live_stack" in getattr(item, "funcargs", {}):
        stack = item.funcargs["live_stack"]
    if report.failed and isinstance(stack, Stack):
        report.sections.append(("live stack logs", stack.logs(lines=120)))
    return report


@pytest.fixture
def org(db):
    return OrganizationFactory(slug="acme", name="Acme")


@pytest.fixture
def other_org(db):
    return OrganizationFactory(slug="globex", name="Globex")


def _member(org, role):
    return MembershipFactory(organization=org, role=role, user=UserFactory()).user


@pytest.fixture
def member(org):
    return _member(org, Role.MEMBER)


@pytest.fixture
def viewer(org):
    return _member(org, Role.VIEWER)


@pytest.fixture
def admin(org):
    return _member(org, Role.ADMIN)


@pytest.fixture
def outsider(other_org):
    return _member(other_org, Role.OWNER)


@pytest.fixture
def project(org):
    return ProjectFactory(organization=org, name="Vision", slug="vision")


@pytest.fixture
def other_project(other_org):
    return ProjectFactory(organization=other_org, name="Secret plans", slug="secret-plans")


def _client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def client_for():
    return _client_for


@pytest.fixture
def api_client_for():
    """An API client that sends `Authorization: Bearer <key>` for a fresh key of `org`."""

    def make(org, role: str = Role.MEMBER) -> APIClient:
        name = services.api_key_free_name(org, "test")  # "test", then "test-2"...
        _, full_key = services.api_key_create(organization=org, name=name, role=role)
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {full_key}")
        return client

    return make


# A real Trainyard (web, worker, beat as processes) on the test database, shared by the
# integration and browser tests of a session. Tests that use it are transactional.
def _test_database_url() -> str:
    """DATABASE_URL (set by config.test_settings) pointed at the test database."""
    parts = urlsplit(os.environ["DATABASE_URL"])
    return urlunsplit(parts._replace(path=f"/{connection.settings_dict['NAME']}"))


@pytest.fixture(scope="session")
def stack(request, django_db_setup, django_db_blocker, tmp_path_factory):
    with django_db_blocker.unblock():
        database_url = _test_database_url()
    running = Stack(
        database_url=database_url,
        redis_url=settings.REDIS_URL,
        workdir=tmp_path_factory.mktemp("stack"),
    )
    request.config.stash[parallel.STACK_KEY] = running
    parallel.register(request.config, port=running.port)
    parallel.register(request.config, port=running.gateway_port)
    try:
        running.start()
        yield running
    finally:
        running.stop()


@pytest.fixture
def live_stack(stack):
    """The stack for one test: its worker takes tasks during the test; afterwards every job
    the test left running is terminated and waited for, and the worker goes idle, so nothing
    holds database locks while the test database is flushed."""
    from apps.jobs import services
    from apps.jobs.models import Job
    from tests.live import wait_until

    stack.resume_workers()
    yield stack
    for job in Job.objects.exclude(state__in=TERMINAL_STATES):
        services.job_terminate(job=job)
    wait_until(
        lambda: not Job.objects.exclude(state__in=TERMINAL_STATES).exists(),
        timeout=60,
        what="the test's jobs to end",
    )
    stack.pause_workers()


@pytest.fixture(scope="session")
def tiny_model() -> Path:
    """A tiny Llama with a tokenizer trained here (no hub), built once per machine and source
    digest (`tests.artefacts`), shared by every worker."""

    def build(root: Path) -> str:
        from trainer.tiny import build_tiny_model

        return str(build_tiny_model(root / "model"))

    return Path(cached("tiny-model", ("trainer",), build))


@pytest.fixture(scope="session")
def demo_data() -> dict[str, Path]:
    """The learnable toy dataset in each of the six formats."""

    def build(root: Path) -> dict[str, str]:
        from trainer.demo_data import write_demo_datasets

        return {name: str(path) for name, path in write_demo_datasets(root).items()}

    built = cached("demo-data", ("trainer",), build)
    return {name: Path(path) for name, path in built.items()}


@pytest.fixture
def solo(transactional_db) -> str:
    """An accelerator of the test's own with one local slot (nothing else competes for
    it): the second job on it must displace the first or wait."""
    name = f"solo-{uuid.uuid4().hex[:6]}"
    accelerator = Accelerator.objects.create(
        name=name, display_name="One local slot", vendor="cpu", memory_gb=0, gpu_counts=[1]
    )
    Offer.objects.create(
        provider=Provider.objects.get(name="local"),
        accelerator=accelerator,
        gpu_counts=[1],
        capacity=1,
        price_per_gpu_hour_micros=600_000,
        min_price_per_gpu_hour_micros=600_000,
        max_price_per_gpu_hour_micros=600_000,
    )
    return name


# STORAGE_BACKEND=s3 against a real S3-compatible HTTP endpoint: moto's server on loopback,
# reached through the same boto3 / django-storages client production uses.
S3_CREDENTIALS = {"access_key_id": "testing", "secret_access_key": "testing-secret"}
S3_REGION = "us-east-1"


@pytest.fixture(scope="session")
def s3_endpoint():
    from moto.server import ThreadedMotoServer

    from tests.live import free_port

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # a line per S3 request
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@dataclass
class S3Bucket:
    name: str
    client: object

    def keys(self) -> list[str]:
        listing = self.client.list_objects_v2(Bucket=self.name)
        return sorted(item["Key"] for item in listing.get("Contents", []))

    def read(self, key: str) -> bytes:
        return self.client.get_object(Bucket=self.name, Key=key)["Body"].read()


@pytest.fixture
def s3_bucket(s3_endpoint, settings, tmp_path) -> S3Bucket:
    """A fresh bucket, and the default storage switched to it as STORAGE_BACKEND=s3 would
    (the `settings` fixture resets `default_storage`, and back afterwards). MEDIA_ROOT points
    at an empty folder, so a test can show nothing went to the local disk."""
    import boto3

    from config.storage import default_storage_config

    name = f"trainyard-{uuid.uuid4().hex[:12]}"
    client = boto3.client(
        "s3",
        endpoint_url=s3_endpoint,
        region_name=S3_REGION,
        aws_access_key_id=S3_CREDENTIALS["access_key_id"],
        aws_secret_access_key=S3_CREDENTIALS["secret_access_key"],
    )
    client.create_bucket(Bucket=name)
    settings.MEDIA_ROOT = tmp_path / "media-unused"
    settings.STORAGES = {
        **settings.STORAGES,
        "default": default_storage_config(
            "s3", bucket=name, endpoint_url=s3_endpoint, region=S3_REGION, **S3_CREDENTIALS
        ),
    }
    return S3Bucket(name=name, client=client)


# -- offers and the attempts that hold them ------------------------------------------------
# The migrations seed the `local` provider with a `cpu` offer: capacity 2, gpu_counts [1],
# $0.10 per slot-hour.


@pytest.fixture
def cpu_offer(db) -> Offer:
    return Offer.objects.get(provider__name="local", accelerator__name="cpu")


@pytest.fixture
def make_offer(db):
    """An offer on a provider named `provider` (created when new). Prices are micro-dollars
    per GPU-hour; the band defaults to the single price (on-demand)."""

    def make(
        provider: str,
        accelerator: str = "nvidia-a100-80gb",
        *,
        price: int,
        band: tuple[int, int] | None = None,
        capacity: int = 8,
        gpu_counts: list[int] | None = None,
        market: str = Offer.Market.ON_DEMAND,
        enabled: bool = True,
    ) -> Offer:
        owner, _ = Provider.objects.get_or_create(name=provider, defaults={"kind": "ssh"})
        low, high = band or (price, price)
        return Offer.objects.create(
            provider=owner,
            accelerator=Accelerator.objects.get(name=accelerator),
            gpu_counts=gpu_counts if gpu_counts is not None else [1, 2, 4, 8],
            capacity=capacity,
            market=market,
            price_per_gpu_hour_micros=price,
            min_price_per_gpu_hour_micros=low,
            max_price_per_gpu_hour_micros=high,
            enabled=enabled,
        )

    return make


@pytest.fixture
def hold(org):
    """An attempt of a fresh job of `org` on `offer` holding `gpu_count` GPUs; `ended=True`
    makes it an attempt that has already given them back."""
    project = ProjectFactory(organization=org)

    def make(offer: Offer, gpu_count: int = 1, *, ended: bool = False) -> Attempt:
        job = Job.objects.create(
            organization=org,
            project=project,
            name="holder",
            spec={},
            accelerator=offer.accelerator.name,
            gpu_count=gpu_count,
            ephemeral_disk_gb=10,
        )
        return Attempt.objects.create(
            job=job,
            number=1,
            provider=offer.provider,
            offer=offer,
            accelerator=offer.accelerator.name,
            gpu_count=gpu_count,
            price_micros_hr=offer.price_per_gpu_hour_micros * gpu_count,
            ended_at=timezone.now() if ended else None,
        )

    return make


# -- containers ----------------------------------------------------------------------------


@pytest.fixture(scope="session")
def podman_image(tmp_path_factory) -> str:
    """The test image in podman's store (built offline once per machine; a file lock keeps two
    workers from both building it)."""
    from filelock import FileLock

    from tests.artefacts import CACHE

    CACHE.mkdir(parents=True, exist_ok=True)
    try:
        with FileLock(CACHE / "podman-image.lock", timeout=900):
            return ensure_test_image(tmp_path_factory.mktemp("image"))
    except RuntimeError as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="session")
def trainer_image(tmp_path_factory) -> str:
    """This release's trainer image in podman's store, made by the builder a user runs
    (`manage.py build_images`, which `make run` runs too): built once per machine and set
    of packages, its top layer again when the workload code changed."""
    from apps.providers import images
    from apps.providers.backends.local import container_runtime

    try:
        trainer, _, _ = images.ensure_workload_image(
            container_runtime("podman"),
            say=lambda line: None,
            scratch=tmp_path_factory.mktemp("image"),
        )
    except images.ImageBuildError as exc:
        pytest.fail(str(exc))
    return trainer


@pytest.fixture
def shared_host(db):
    """The seeded local provider (host runtime, single-tenant by default) opened to several
    organizations at once, as an operator may: for tests whose jobs of two organizations
    must be placed side by side."""
    Provider.objects.filter(name="local").update(config={"multi_tenant": True})


@pytest.fixture(autouse=True)
def _fresh_throttles(request, monkeypatch):
    """Throttle counters live in Redis, beyond any one test's database: each test starts
    with none, so one test's failed sign-ins never lock out another's users. In-process
    tests count under a key prefix of their own (no Redis round trip at all); tests whose
    live stack's processes count under the real prefixes clear those."""
    from apps.accounts import throttle

    if {"stack", "live_stack"} & set(request.fixturenames):
        client = redis.Redis.from_url(settings.REDIS_URL)
        keys = [
            *client.scan_iter(f"{throttle.SIGN_IN_PREFIX}*", count=1000),
            *client.scan_iter("trainyard:throttle:*", count=1000),
        ]
        if keys:
            client.delete(*keys)
        return
    test = uuid.uuid4().hex[:12]
    monkeypatch.setattr(throttle, "SIGN_IN_PREFIX", f"trainyard:test-{test}:signin:")
    monkeypatch.setattr(throttle, "API_PREFIX", f"trainyard:test-{test}:throttle:key:")


TRANSACTIONAL = {"transactional_db", "django_db_reset_sequences", "live_server", "live_stack"}


@pytest.fixture(autouse=True)
def _catalog_seeded(request):
    """A test in a transaction sees the catalog its migrations seed, even when a
    transactional test ran before it on this worker (its flush leaves the tables empty; in a
    serial run Django orders those last, under xdist a worker takes them in any order). The
    seed goes in the test's own transaction, rolled back with it."""
    marker = request.node.get_closest_marker("django_db")
    names = set(request.fixturenames)
    if not ("db" in names or TRANSACTIONAL & names or marker is not None):
        return
    request.getfixturevalue("_django_db_helper")
    # A flush recreates the content types under new ids (or leaves none, when it skips
    # post_migrate); the process's cache would still hand out the old ones.
    ContentType.objects.clear_cache()
    if TRANSACTIONAL & names or (marker is not None and marker.kwargs.get("transaction")):
        return
    if not Accelerator.objects.exists():
        for name in (
            "0002_seed_accelerators",
            "0004_seed_local_offer",
            "0005_accelerator_reference_price",
        ):
            importlib.import_module(f"apps.catalog.migrations.{name}").seed(django_apps, None)


@pytest.fixture(autouse=True)
def _ledger_balances(request):
    """After every test that touches the database, before its data is rolled back or
    flushed: the ledger's accounts sum to zero and every cached balance equals the one
    recomputed from the transfers."""
    uses_db = {"db", "transactional_db", "django_db_reset_sequences", "live_stack"}
    if not (uses_db & set(request.fixturenames) or request.node.get_closest_marker("django_db")):
        yield
        return
    request.getfixturevalue("_django_db_helper")  # set up first, so torn down after this
    yield
    from django.db import connection

    from apps.billing import ledger

    if connection.connection is not None and not connection.is_usable():
        return  # the test closed its connection (and with it the rows it would check)
    assert ledger.total_balance() == 0, "the ledger's accounts do not sum to zero"
    assert ledger.audit() == [], "cached balances differ from the transfers"


@pytest.fixture(scope="session")
def tiny_adapters(tiny_model, demo_data) -> dict[str, Path]:
    """Two LoRA adapters of the tiny model and a checkpoint, trained once per machine and
    source digest by the real trainer (`tests.adapters`): `{"a", "b", "a_checkpoint"}` to
    their directories."""
    from tests.adapters import train_adapters

    def build(root: Path) -> dict[str, str]:
        trained = train_adapters(root, tiny_model, demo_data)
        return {name: str(path) for name, path in trained.items()}

    built = cached("tiny-adapters", ("trainer", "tests/adapters.py"), build)
    return {name: Path(path) for name, path in built.items()}
