"""The local provider's runtimes: which one runs, the container's argv, one container per
attempt, and the host runtime's tenancy and user."""

from __future__ import annotations

import json
import os
import pwd
import urllib.request
import uuid

import pytest

from apps.providers.backends import containers, single_tenant
from apps.providers.backends import local as local_backend
from apps.providers.backends.base import PermanentBackendError
from apps.providers.backends.containers import ContainerRuntime, RunSpec
from apps.providers.models import Provider
from tests.containers import containers_of_job
from tests.factories import OrganizationFactory
from tests.live import wait_until
from tests.providers.helpers import launch_args, reachable_by_everyone, run_to_exit


def _spec(**overrides) -> RunSpec:
    values = {
        "name": "trainyard-job_x-attempt-1",
        "image": "registry.example/team/train:1",
        "workdir": "/var/work/job_x/attempt-1",
        "runner_dir": "/app/runner",
        "env": {"TRAINYARD_RUNNER_TOKEN": "ty-secret-token", "PYTHONPATH": "/opt/trainyard"},
    }
    return RunSpec(**{**values, **overrides})


def test_the_container_argv_mounts_the_runner_read_only_and_keeps_values_out_of_argv():
    argv = ContainerRuntime("podman", ("--runtime", "runc"), ("--ulimit", "nofile=1024:4096"))
    argv = argv.run_argv(_spec())

    assert argv[:4] == ["podman", "--runtime", "runc", "run"]
    assert "/var/work/job_x/attempt-1:/work:rw" in argv
    assert "/app/runner:/opt/trainyard/runner:ro" in argv
    assert argv[argv.index("--name") + 1] == "trainyard-job_x-attempt-1"
    assert argv[-3:] == ["registry.example/team/train:1", "-m", "runner"]
    assert argv[argv.index("--entrypoint") + 1] == "python3"
    assert "--ulimit" in argv and "nofile=1024:4096" in argv
    assert "TRAINYARD_RUNNER_TOKEN" in argv and "ty-secret-token" not in " ".join(argv)
    assert not any("nvidia" in part or part == "--gpus" for part in argv)
    assert "--network=slirp4netns" in argv
    assert not any(part in {"--network=host", "--net=host"} for part in argv)


@pytest.mark.parametrize(
    ("binary", "network", "expected"),
    [
        ("podman", "isolated", "--network=slirp4netns"),
        ("podman", "none", "--network=none"),
        ("docker", "isolated", "--network=bridge"),
        ("docker", "none", "--network=none"),
    ],
)
def test_every_attempt_has_a_network_of_its_own_never_the_hosts(binary, network, expected):
    spec = _spec(
        network=network,
        read_only={"/var/work/job_x/attempt-1.control": "/run/trainyard"},
        published=((41234, 8000),),
    )
    argv = ContainerRuntime(binary).run_argv(spec)

    assert [part for part in argv if part.startswith("--network")] == [expected]
    assert "/var/work/job_x/attempt-1.control:/run/trainyard:ro" in argv
    # The service port reaches the host's loopback only.
    assert argv[argv.index("--publish") + 1] == "127.0.0.1:41234:8000"


@pytest.mark.parametrize("network", ["host", "bridge", "container:other", ""])
def test_any_other_network_is_refused_before_anything_starts(network):
    with pytest.raises(PermanentBackendError, match="never shares the host's network"):
        ContainerRuntime("podman").run_argv(_spec(network=network))


@pytest.mark.parametrize(
    ("code", "message", "refused"),
    [
        (126, "runc create failed: error setting rlimit type 7: operation not permitted", True),
        (125, "error gathering device information: no such file or directory", True),
        (125, "unknown flag: --bogus", True),
        (127, "executable file `python3` not found in $PATH", True),
        (125, "error allocating lock for new container: database is locked", False),
        (125, "the container name is already in use by 3f2e", False),
        (1, "something else", False),
    ],
)
def test_a_runtime_that_refuses_is_told_from_one_that_hiccups(code, message, refused):
    assert containers.refused(code, message) is refused


@pytest.mark.parametrize(
    ("binary", "devices", "expected"),
    [
        ("podman", (1,), ["--device", "nvidia.com/gpu=1"]),
        ("podman", (0, 3), ["--device", "nvidia.com/gpu=0", "--device", "nvidia.com/gpu=3"]),
        ("docker", (1,), ["--gpus", '"device=1"']),
        ("docker", (0, 3), ["--gpus", '"device=0,3"']),
    ],
)
def test_a_gpu_attempt_gets_only_its_own_devices(binary, devices, expected):
    argv = ContainerRuntime(binary).run_argv(_spec(gpu_devices=devices))

    gpu_flags = [part for part in argv if part in {"--device", "--gpus"}]
    start = argv.index(expected[0])
    assert argv[start : start + len(expected)] == expected
    assert len(gpu_flags) == len(expected) // 2  # nothing else, "all" least of all
    assert not any(part.endswith("=all") or part == "all" for part in argv)
    assert start + len(expected) <= argv.index("registry.example/team/train:1")


def test_auto_picks_a_working_container_runtime_else_host(settings, monkeypatch, tmp_path):
    settings.LOCAL_RUNTIME = "auto"
    local_backend._detected_runtime.cache_clear()
    podman_works = ContainerRuntime("podman").works()
    assert local_backend.runtime_of({}) == ("podman" if podman_works else "host")

    monkeypatch.setenv("PATH", str(tmp_path))  # neither podman nor docker on the PATH
    local_backend._detected_runtime.cache_clear()
    assert local_backend.runtime_of({}) == "host"
    assert local_backend.runtime_of({"runtime": "podman"}) == "podman"
    local_backend._detected_runtime.cache_clear()


def test_an_unknown_runtime_is_a_permanent_error():
    with pytest.raises(PermanentBackendError, match="Unknown runtime 'lxc'"):
        local_backend.runtime_of({"runtime": "lxc"})


def test_only_the_host_runtime_is_single_tenant_and_an_operator_may_opt_out(settings):
    settings.LOCAL_MULTI_TENANT = False
    assert single_tenant(Provider(name="p", kind="local", config={"runtime": "host"}))
    settings.LOCAL_MULTI_TENANT = True
    assert not single_tenant(Provider(name="p", kind="local", config={"runtime": "host"}))
    assert not single_tenant(Provider(name="p", kind="kubernetes", config={}))  # no backend

    def provider(config):
        return Provider(name="p", kind="local", config=config)

    assert single_tenant(provider({"runtime": "host", "multi_tenant": False}))
    assert not single_tenant(provider({"runtime": "host", "multi_tenant": True}))
    assert not single_tenant(provider({"runtime": "podman"}))


def test_an_image_removed_after_a_launch_found_it_is_reported_unavailable(podman_image, tmp_path):
    podman = local_backend.container_runtime("podman")
    image = f"localhost/trainyard-gone:{uuid.uuid4().hex[:8]}"
    assert podman.cli("tag", podman_image, image).returncode == 0
    podman.ensure_image(image, pull_timeout_s=10)  # found: not looked for again for a while
    assert podman.cli("rmi", image).returncode == 0  # that name only: the image has others
    spec = _spec(image=image, name=f"trainyard-gone-{uuid.uuid4().hex[:8]}", workdir=str(tmp_path))
    with pytest.raises(containers.ImageUnavailable, match=image):
        podman.run(spec, host_env=dict(os.environ))
    assert podman.state(spec.name).status == "missing"


@pytest.mark.live
@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_a_launch_cut_off_before_its_handle_was_saved_adopts_the_container(
    settings, tmp_path, live_server, podman_image
):
    settings.LOCAL_WORK_DIR = tmp_path / "work"
    Provider.objects.filter(name="local").update(config={"runtime": "podman"})
    org = OrganizationFactory(compute_enabled=True)
    backend, request, bootstrap, _ = launch_args(
        org, image=podman_image, control_url=live_server.url, command=["sleep", "20"]
    )
    handle = backend.launch(request, bootstrap)
    try:
        # What a worker killed between `podman run` and saving the handle leaves behind.
        (tmp_path / "work" / request.job_id / "attempt-1" / "handle.json").unlink()

        assert backend.launch(request, bootstrap) == handle
        assert containers_of_job(request.job_id) == [handle["container"]]
        # The job page says where it runs.
        assert backend.where_it_runs(handle) == (
            f"in a podman container of image {podman_image}, on a network of its own"
        )
    finally:
        backend.release(handle)
    assert containers_of_job(request.job_id) == []


@pytest.mark.live
@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_a_host_runner_runs_as_nobody_for_good_and_cannot_read_the_control_planes_environment(
    settings, tmp_path, live_server
):
    settings.LOCAL_WORK_DIR = tmp_path / "work"
    reachable_by_everyone(tmp_path)  # the work root, for the unprivileged runner
    Provider.objects.filter(name="local").update(
        config={"runtime": "host", "python": "/usr/bin/python3"}
    )
    org = OrganizationFactory(compute_enabled=True)
    script = (
        "import os; print('ids', os.getresuid(), os.getresgid(), os.getgroups());"
        "print('caps', [l.split()[1] for l in open('/proc/self/status') if l[:6] == 'CapEff']);"
        f"print('environ', os.access('/proc/{os.getpid()}/environ', os.R_OK))"
    )
    backend, request, bootstrap, _ = launch_args(
        org, image="local", control_url=live_server.url, command=["/usr/bin/python3", "-c", script]
    )
    handle, lines = run_to_exit(backend, request, bootstrap)
    # Real, effective and saved ids all nobody's, no groups, no capabilities: it cannot
    # switch back to root.
    nobody = pwd.getpwnam("nobody")
    uid, gid = nobody.pw_uid, nobody.pw_gid
    assert lines == [
        f"ids ({uid}, {uid}, {uid}) ({gid}, {gid}, {gid}) []",
        "caps ['0000000000000000']",
        "environ False",
    ]
    workdir = tmp_path / "work" / request.job_id / "attempt-1"
    assert (workdir.stat().st_uid, workdir.stat().st_mode & 0o777) == (0, 0o700)
    # The job page says so: no container, and as whom.
    assert backend.where_it_runs(handle) == (
        "as a process of the control plane's host (no container: its image is unused), "
        "as user nobody"
    )


@pytest.mark.live
@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_a_work_directory_nobody_can_reach_keeps_the_runner_root_and_says_why(
    settings, tmp_path, live_server, caplog
):
    """What a root `make run` from a checkout under /root meets: nobody may run the
    interpreter but not pass into the var directory. The runner stays root (as for an
    interpreter nobody can run) instead of failing on its own token file, attempt after
    attempt."""
    reachable_by_everyone(tmp_path)
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    settings.LOCAL_WORK_DIR = private / "work"
    Provider.objects.filter(name="local").update(
        config={"runtime": "host", "python": "/usr/bin/python3"}
    )
    org = OrganizationFactory(compute_enabled=True)
    script = "import os; print('uid', os.getuid())"
    backend, request, bootstrap, _ = launch_args(
        org, image="local", control_url=live_server.url, command=["/usr/bin/python3", "-c", script]
    )
    handle, lines = run_to_exit(backend, request, bootstrap)
    assert lines == ["uid 0"]
    assert backend.where_it_runs(handle).endswith("as user root")
    assert f"nobody cannot reach {private / 'work'}" in caplog.text


@pytest.mark.live
@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_a_container_created_but_never_started_is_replaced_and_polled_as_lost(
    settings, tmp_path, live_server, podman_image
):
    """What a `run` cut off between create and start leaves (after the launch planned its
    handle, as it does before any run): never adopted as launched."""
    settings.LOCAL_WORK_DIR = tmp_path / "work"
    Provider.objects.filter(name="local").update(config={"runtime": "podman"})
    org = OrganizationFactory(compute_enabled=True)
    backend, request, bootstrap, _ = launch_args(
        org, image=podman_image, control_url=live_server.url, command=["sleep", "20"]
    )
    name = containers.container_name(request.job_id, request.attempt)
    podman = backend.containers
    created = podman.cli("create", "--name", name, *podman.run_args, podman_image, "true")
    assert created.returncode == 0, created.stderr
    workdir = backend.workdir(request.job_id, request.attempt)
    control_dir = workdir.parent / f"{workdir.name}{local_backend.CONTROL_DIR_SUFFIX}"
    control_dir.mkdir(parents=True)
    planned = {"runtime": "podman", "container": name, "workdir": str(workdir)}
    (control_dir / local_backend.PLANNED_HANDLE).write_text(json.dumps(planned))
    stale = {"runtime": "podman", "container": name, "workdir": str(tmp_path / "w")}
    assert backend.poll(stale).state == "lost"

    handle = backend.launch(request, bootstrap)
    try:
        assert backend.containers.state(name).status == "running"
        assert handle["control"]["pid"] > 0
    finally:
        backend.release(handle)
    assert containers_of_job(request.job_id) == []
    wait_until(lambda: not local_backend.procfs.alive(handle["control"]["pid"]), timeout=10)


SERVES = (
    "import http.server, os, socketserver\n"
    "class H(http.server.BaseHTTPRequestHandler):\n"
    "    def do_GET(self):\n"
    "        self.send_response(200); self.end_headers(); self.wfile.write(b'from inside')\n"
    "port = int(os.environ['TRAINYARD_SERVICE_PORT'])\n"
    "http.server.HTTPServer(('0.0.0.0', port), H).serve_forever()\n"
)


@pytest.mark.live
@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_a_serving_workload_is_reached_through_its_port_published_on_loopback_only(
    settings, tmp_path, live_server, podman_image
):
    settings.LOCAL_WORK_DIR = tmp_path / "work"
    Provider.objects.filter(name="local").update(config={"runtime": "podman"})
    org = OrganizationFactory(compute_enabled=True)
    backend, request, bootstrap, _ = launch_args(
        org, image=podman_image, control_url=live_server.url, command=["python3", "-c", SERVES]
    )
    handle = backend.launch(request, bootstrap)
    try:
        url = backend.endpoint_url(handle, local_backend.SERVICE_PORT)
        host_port = handle["ports"][str(local_backend.SERVICE_PORT)]
        assert url == f"http://127.0.0.1:{host_port}"
        wait_until(lambda: _get(url) == b"from inside", timeout=60, what="the workload's server")
        with pytest.raises(PermanentBackendError, match="not published"):
            backend.endpoint_url(handle, 9999)
        published = backend.containers.cli("port", handle["container"]).stdout
        assert published.split() == ["8000/tcp", "->", f"127.0.0.1:{host_port}"]
    finally:
        backend.release(handle)


def _get(url: str) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return answer.read()
    except OSError:
        return None
