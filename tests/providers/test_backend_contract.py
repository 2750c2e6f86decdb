"""The contract every backend keeps (docs/adding-a-provider.md), run against each backend
with the real runner talking to a live control plane: `poll_many` included."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from apps.catalog.models import Offer
from apps.jobs.models import Attempt
from apps.providers.backends import REGISTRY, kube_manifests
from apps.providers.backends.base import BackendError, PollResult
from apps.providers.models import Provider
from apps.secrets import services as secret_services
from runner import procfs, protocol
from tests.containers import containers_of_job
from tests.factories import OrganizationFactory
from tests.live import wait_until
from tests.providers.helpers import launch_args
from tests.providers.slurm_cluster import LIVE_STATES, squeue_state

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


# Every backend kind, the local backend in each of its runtimes, and Kubernetes both on the
# emulated cluster (tests/providers/kube/) and on a real one when a test run names one.
VARIANTS = [(kind, None) for kind in sorted(REGISTRY) if kind not in {"local", "kubernetes"}] + [
    ("local", "host"),
    ("local", "podman"),
    ("kubernetes", "emulated"),
    ("kubernetes", "real"),
]
# The emulated cluster of the running test (its hooks stand for a crash).
_cluster: list = []


@pytest.fixture(params=VARIANTS, ids=lambda v: "-".join(filter(None, v)))
def variant(request, settings, tmp_path):
    kind, runtime = request.param
    settings.LOCAL_WORK_DIR = tmp_path / "work"
    _cluster.clear()
    image = "local"
    if runtime in ("podman", "emulated"):
        image = request.getfixturevalue("podman_image")
    if kind == "ssh":
        request.getfixturevalue("ssh_provider")  # this machine's sshd, on loopback
    if kind == "local":
        Provider.objects.filter(kind=kind).update(config={"runtime": runtime})
    if kind == "slurm":
        request.getfixturevalue("slurm_provider")
    if runtime == "emulated":
        request.getfixturevalue("kubernetes_provider")
        _cluster[:] = [request.getfixturevalue("kube_cluster")]
    if runtime == "real":
        image = request.getfixturevalue("real_kubernetes_provider")
    return kind, image


def _launch(variant, live_server, command: list[str]):
    kind, image = variant
    org = OrganizationFactory(compute_enabled=True)
    backend, request, bootstrap, attempt = launch_args(
        org, image=image, control_url=live_server.url, command=command
    )
    assert attempt.provider.kind == kind
    return backend, request, bootstrap


def _alive(backend, handle) -> bool:
    """Whether anything of the attempt still runs: its container, its process group (an
    SSH provider's far host is this machine, so its handle's group is one here too), or its
    Slurm job."""
    if backend.kind == "slurm":
        return squeue_state(backend.config["slurm_conf"], handle["job_id"]) in LIVE_STATES
    if backend.kind == "kubernetes":
        return any(
            pod["status"].get("phase") in {"Pending", "Running"} for pod in _pods(backend, handle)
        )
    if "container" in handle:
        return backend.containers.state(handle["container"]).running
    return bool(procfs.group_members(handle["pgid"]))


def _kill_hard(backend, handle) -> None:
    """What a host crash does to the runner: SIGKILL, no chance to write an exit record (on
    an SSH provider's far host, which is this machine; on Slurm: to every process of the job,
    which ends FAILED)."""
    if backend.kind == "slurm":
        conf = {**os.environ, "SLURM_CONF": backend.config["slurm_conf"]}
        argv = ["scancel", "--signal=KILL", "--batch", handle["job_id"]]
        subprocess.run(argv, env=conf, check=True)
    elif backend.kind == "kubernetes" and _cluster:
        _cluster[0].kill_container(handle["job"])
    elif backend.kind == "kubernetes":  # a real cluster: the pod deleted with no grace
        for pod in _pods(backend, handle):
            backend._call(
                "kill",
                backend._core().delete_namespaced_pod,
                pod["metadata"]["name"],
                handle["namespace"],
                grace_period_seconds=0,
            )
    elif "container" in handle:
        backend.containers.kill(handle["container"])
    else:
        os.killpg(handle["pgid"], signal.SIGKILL)


def _pods(backend, handle) -> list[dict]:
    """The attempt's pods, as the cluster lists them."""
    selector = f"{kube_manifests.ATTEMPT_LABEL}={handle['job']}"
    listed = backend._call(
        "list", backend._core().list_namespaced_pod, handle["namespace"], label_selector=selector
    )
    return listed.get("items") or []


def _started(request) -> bool:
    return Attempt.objects.filter(job__public_id=request.job_id, started_at__isnull=False).exists()


def test_launch_is_idempotent_per_attempt(variant, live_server):
    backend, request, bootstrap = _launch(variant, live_server, ["sleep", "30"])
    handle = backend.launch(request, bootstrap)
    try:
        assert backend.launch(request, bootstrap) == handle
        # The runner's `started` report is done before the attempt is killed: a request cut
        # off mid-transaction could deadlock with the test database's flush.
        wait_until(lambda: _started(request), 30, what="the runner's started report")
        if "pgid" in handle:
            assert len(procfs.group_members(handle["pgid"])) == 2  # runner and workload
        assert backend.poll(handle).state == "running"
        assert backend.launch(request, bootstrap) == handle
    finally:
        backend.release(handle)
    # SIGKILL is sent at once; the kernel takes a moment to reap the group.
    wait_until(lambda: not _alive(backend, handle), 10, what="the attempt to be gone")


def _instances(backend, handle, request) -> int:
    """How many copies of the attempt were started: Slurm jobs with its name, containers
    with its labels, or runner processes carrying its job id (a far host is this machine)."""
    if backend.kind == "slurm":
        env = {**os.environ, "SLURM_CONF": backend.config["slurm_conf"]}
        argv = ["squeue", "-h", "--states", "all", "--name", handle["name"], "-o", "%i"]
        listed = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
        return len(listed.stdout.split())
    if backend.kind == "kubernetes":
        selector = f"{kube_manifests.ATTEMPT_LABEL}={handle['job']}"
        listed = backend._call(
            "list",
            backend._batch().list_namespaced_job,
            handle["namespace"],
            label_selector=selector,
        )
        return len(listed.get("items") or []) * max(1, len(_pods(backend, handle)))
    if "container" in handle:
        return len(containers_of_job(request.job_id))
    marker = f"{protocol.ENV_JOB_ID}={request.job_id}"
    runners = 0
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = [a for a in Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0") if a]
        except OSError:
            continue
        # A far host's runner runs the bundle's bytes its sha256 check read (runner.verify).
        is_runner = argv[1:3] == [b"-m", b"runner"] or (
            len(argv) == 2 and argv[1].startswith(b"/proc/self/fd/")
        )
        if is_runner and procfs.environ_has(int(entry), [marker]):
            runners += 1
    return runners


def test_four_racing_launches_start_the_attempt_once(variant, live_server):
    backend, request, bootstrap = _launch(variant, live_server, ["sleep", "30"])
    gate = threading.Barrier(4)
    handles, errors = [], []

    def launch() -> None:
        gate.wait()
        try:
            handles.append(backend.launch(request, bootstrap))
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=launch) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    try:
        assert errors == [] and len(handles) == 4
        assert all(handle == handles[0] for handle in handles)
        wait_until(lambda: _started(request), 60, what="the runner's started report")
        assert _instances(backend, handles[0], request) == 1
    finally:
        for handle in handles[:1]:
            backend.release(handle)
    wait_until(lambda: not _alive(backend, handles[0]), 20, what="the attempt to be gone")


def test_terminate_returns_at_once_and_ends_the_attempt_within_the_grace(variant, live_server):
    backend, request, bootstrap = _launch(
        variant, live_server, ["bash", "-c", "trap '' TERM; sleep 30"]
    )
    handle = backend.launch(request, bootstrap)
    try:
        wait_until(lambda: _started(request), 30, what="the workload")
        began = time.monotonic()
        backend.terminate(handle, grace_s=2)
        assert time.monotonic() - began < 1
        wait_until(lambda: not _alive(backend, handle), 10, what="the attempt to end")
        assert time.monotonic() - began < 2 + 3
        assert backend.poll(handle).state in {"exited", "lost"}
        backend.terminate(handle, grace_s=2)  # safe on a finished handle
    finally:
        backend.release(handle)
        backend.release(handle)


def test_poll_reports_the_exit_code(variant, live_server):
    backend, request, bootstrap = _launch(variant, live_server, ["bash", "-c", "exit 7"])
    handle = backend.launch(request, bootstrap)
    try:
        result = wait_until(
            lambda: (r := backend.poll(handle)).state not in {"queued", "running"} and r,
            30,
            what="the runner to finish",
        )
        assert (result.state, result.exit_code) == ("exited", 7)
    finally:
        backend.release(handle)


def test_the_workload_gets_its_secret_and_its_lines_arrive_masked(variant, live_server):
    _, image = variant
    org = OrganizationFactory(compute_enabled=True)
    secret = secret_services.secret_create(
        organization=org, name="hub", data={"HF_TOKEN": "hf_contract-value"}
    )
    backend, request, bootstrap, attempt = launch_args(
        org,
        image=image,
        control_url=live_server.url,
        command=["bash", "-c", 'echo "token=$HF_TOKEN"; echo "length=${#HF_TOKEN}" >&2'],
        secret_env={"HF_TOKEN": {"secret_id": secret.public_id, "key": "HF_TOKEN"}},
    )
    handle = backend.launch(request, bootstrap)
    try:
        result = wait_until(
            lambda: (r := backend.poll(handle)).state == "exited" and r, 60, what="the exit"
        )
        assert result.exit_code == 0
        lines = wait_until(
            lambda: (
                sorted(attempt.job.log_lines.filter(source="user").values_list("stream", "message"))
                or None
            ),
            10,
            what="the workload's lines",
        )
        assert lines == [("stderr", "length=17"), ("stdout", "token=***")]
    finally:
        backend.release(handle)


def test_a_runner_killed_without_an_exit_record_is_lost(variant, live_server):
    backend, request, bootstrap = _launch(variant, live_server, ["sleep", "30"])
    handle = backend.launch(request, bootstrap)
    try:
        wait_until(lambda: _started(request), 30, what="the workload")
        _kill_hard(backend, handle)
        wait_until(lambda: backend.poll(handle).state != "running", 10, what="the runner to die")
        assert backend.poll(handle).state == "lost"
    finally:
        backend.release(handle)


def test_poll_many_answers_every_attempt_with_its_own_state(variant, live_server):
    """The reconcile pass polls a provider's attempts together: each handle gets what its
    own poll says (one running, one exited with its code, one lost), in the handles' order,
    and a handle that cannot be polled gets its own error without losing the others."""
    _, image = variant
    Offer.objects.filter(enabled=True).update(capacity=8)
    org = OrganizationFactory(compute_enabled=True)  # one organization: single-tenant hosts

    def launch(command: list[str]):
        backend, request, bootstrap, _ = launch_args(
            org, image=image, control_url=live_server.url, command=command
        )
        handle = backend.launch(request, bootstrap)
        handles.append(handle)
        return backend, request, handle

    handles: list[dict] = []
    try:
        backend, lost_request, lost = launch(["sleep", "30"])
        wait_until(lambda: _started(lost_request), 30, what="the first workload")
        _kill_hard(backend, lost)
        _, _, exited = launch(["bash", "-c", "exit 7"])
        wait_until(lambda: backend.poll(exited).state == "exited", 60, what="the exit")
        _, running_request, running = launch(["sleep", "30"])
        wait_until(lambda: _started(running_request), 60, what="the second workload")
        wait_until(lambda: backend.poll(lost).state != "running", 10, what="the kill")

        outcomes = backend.poll_many([running, exited, {}, lost, running])

        assert [(o.state, o.exit_code) for o in outcomes if isinstance(o, PollResult)] == [
            ("running", None),
            ("exited", 7),
            ("lost", None),
            ("running", None),
        ]
        assert isinstance(outcomes[2], BackendError)
        assert backend.poll_many([]) == []
    finally:
        for handle in handles:
            backend.release(handle)


def test_a_backend_module_loads_only_when_its_kind_is_used():
    probe = (
        "import sys, django; django.setup();"
        "from apps.providers.backends import backend_class;"
        "print('apps.providers.backends.local' in sys.modules);"
        "backend_class('local');"
        "print('apps.providers.backends.local' in sys.modules)"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.test_settings"}
    run = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, env=env
    )

    assert run.stdout.split() == ["False", "True"]
