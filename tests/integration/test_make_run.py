"""`make run` itself, as a newcomer runs it: on a port other than 8000 its runners follow the
server, its own Redis wants a password, a hard kill of it takes web, worker and beat down
with it, and it checks the container runtime before it serves (finding the flags this
machine's podman needs, or stopping with the fix)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import threading
import uuid
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
import requests

from apps.providers import images
from apps.providers.backends.local import container_runtime
from tests.live import ROOT, base_env, free_port, manage, wait_until, with_demo_model

pytestmark = pytest.mark.live

REDIS_URL = "redis://127.0.0.1:6379/14"  # apart from the suite's own stack (db 15)
PASSWORD = "make-run-test-password"


def _env(tmp_path: Path, port: int, redis_url: str | None = REDIS_URL) -> dict[str, str]:
    """`redis_url` None: unset, so `make run` starts its own Redis."""
    env = base_env(
        DEBUG="1",
        TRAINYARD_VAR_DIR=str(tmp_path / "var"),
        DATABASE_URL="",  # the embedded SQLite default, as on a laptop
        REDIS_URL=redis_url or "",
        WEB_PORT=str(port),
        # Its SSH gateway on a port of its own (2222 by default), as its web server is.
        SSH_GATEWAY_PORT=str(free_port()),
        DEMO_PASSWORD=PASSWORD,
        RECONCILE_INTERVAL_S="1",
        HEARTBEAT_INTERVAL_S="1",
    )
    unset = ["SECRET_KEY", "SECRETS_KEYS", "TRAINYARD_PUBLIC_URL", "MAKEFLAGS", "MFLAGS"]
    # make run's own default, not the test settings' mark.
    unset.append("LOCAL_HOST_RUNTIME_DEV_ONLY")
    for name in [*unset, *([] if redis_url else ["REDIS_URL"])]:
        env.pop(name, None)
    return env


def _healthy(port: int) -> bool:
    try:
        return requests.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
    except requests.ConnectionError:
        return False


def _stack_pids(var_dir: Path) -> list[int]:
    """Every live process started for this stack: its environment names its var dir. Not
    make run's own Redis, which outlives it by design (the next `make run` reuses it)."""
    found = []
    marker = f"TRAINYARD_VAR_DIR={var_dir}".encode()
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            with suppress(OSError):
                if marker in Path(f"/proc/{entry}/environ").read_bytes().split(b"\0"):
                    stat = Path(f"/proc/{entry}/stat").read_text()
                    name, state = stat.split("(", 1)[1].rsplit(")", 1)
                    if state.split()[0] not in ("Z", "X") and name != "redis-server":
                        found.append(int(entry))
    return found


@contextmanager
def make_run(tmp_path: Path, port: int, name: str = "run", env: dict[str, str] | None = None):
    log = tmp_path / f"make-{name}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            ["make", "run"],
            cwd=ROOT,
            env=env or _env(tmp_path, port),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    proc.log = log
    try:
        yield proc
    finally:
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        redis.Redis.from_url(REDIS_URL).flushdb()
        with suppress(FileNotFoundError, ProcessLookupError, ValueError):  # its own Redis
            os.kill(int((tmp_path / "var" / "redis" / "redis.pid").read_text()), signal.SIGKILL)


def _submit(port: int, env: dict[str, str], name: str, image: str, command: list[str]) -> str:
    """A job of the demo organization's, through the API; its final state."""
    key = manage("create_api_key", "--org", "demo", env=env).stdout.strip().splitlines()
    headers = {"Authorization": f"Bearer {key[-1]}", "Idempotency-Key": uuid.uuid4().hex}
    body = {
        "name": name,
        "compute": {"accelerator": "cpu", "gpu_count": 1, "ephemeral_disk_gb": 1},
        "container": {"image": image, "command": command},
    }
    base = f"http://127.0.0.1:{port}/api/v1/compute/jobs"
    created = requests.post(base, json=body, headers=headers, timeout=10)
    assert created.status_code == 201, created.text
    job_url = f"{base}/{created.json()['id']}"

    def finished():
        state = requests.get(job_url, headers=headers, timeout=5).json()["state"]
        return state if state in ("succeeded", "failed", "terminated") else None

    return wait_until(finished, timeout=120, interval=0.5, what="the job")


@dataclass
class Booted:
    """A `make run` of this module's, on its own Redis, with the demo model in place."""

    proc: subprocess.Popen
    port: int
    env: dict[str, str]
    var_dir: Path


@pytest.fixture(scope="module")
def _boots(tmp_path_factory, tiny_model):
    """Module-wide, so the tests that need a healthy `make run` share one boot (its migrate,
    seed and five processes' start: about 20 CPU-seconds) while it is up."""
    with ExitStack() as stack:
        yield stack, tmp_path_factory, tiny_model


@pytest.fixture
def booted(_boots) -> Booted:
    """The module's running `make run`, started when there is none or a test took the last
    one down (the hard-kill test does)."""
    stack, tmp_path_factory, tiny_model = _boots
    current = getattr(stack, "booted", None)
    if current is None or current.proc.poll() is not None or not _healthy(current.port):
        tmp = tmp_path_factory.mktemp("make-run")
        port = free_port()
        env = _env(tmp, port, redis_url=None)
        with_demo_model(tmp / "var", tiny_model)  # the newcomer's test builds it
        proc = stack.enter_context(make_run(tmp, port, env=env))
        wait_until(lambda: _healthy(port) or proc.poll() is not None, timeout=240, what="make run")
        assert proc.poll() is None, proc.log.read_text()
        current = stack.booted = Booted(proc, port, env, tmp / "var")
    return current


class Listener:
    """A server on 127.0.0.1:8000 that counts the connections it gets (when 8000 is free)."""

    def __init__(self) -> None:
        self.connections = 0
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 8000))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.stopped = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.stopped.is_set():
            with suppress(TimeoutError, OSError):
                conn, _ = self.sock.accept()
                self.connections += 1
                conn.close()

    def close(self) -> None:
        self.stopped.set()
        self.sock.close()


def test_on_another_port_the_runner_reports_to_that_port_and_never_to_8000(booted):
    """With REDIS_URL unset, on make run's own Redis: a password on a socket of its own."""
    port, env, proc = booted.port, booted.env, booted.proc
    listener = Listener()  # fails the test when 8000 is taken: then the check proves nothing
    try:
        log = proc.log.read_text()
        assert f"Trainyard: http://127.0.0.1:{port}/" in log
        # It names the CLI it installed and how to put it on PATH (the README's quickstart).
        assert "/trainyard  (on PATH in another shell: export PATH=" in log
        # It says where jobs run (the host runtime here, as the suite's settings ask).
        assert "Jobs run as processes of this host (LOCAL_RUNTIME=host)" in log
        sock = booted.var_dir / "redis" / "redis.sock"
        assert f"Started redis-server on {sock}, password required." in log

        # The job goes through the worker, whose broker is that Redis.
        job = ["python", "-c", "print('hi')"]
        assert _submit(port, env, "on-another-port", "local", job) == "succeeded"
        # Its outcome went through every hook on SQLite (webhooks' lookups included).
        wait_until(
            lambda: re.search(r"Task jobs.job_outcome\[.*\] succeeded", proc.log.read_text()),
            timeout=60,
            what="the job's outcome task",
        )
        assert "job_outcome failed" not in proc.log.read_text()

        password = (booted.var_dir / "redis" / "password").read_text().strip()
        assert password not in proc.log.read_text()
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(unix_socket_path=str(sock), protocol=2).ping()
        assert redis.Redis(unix_socket_path=str(sock), password=password).ping()
    finally:
        listener.close()
    assert listener.connections == 0


def test_a_hard_kill_takes_the_stack_down_and_a_taken_port_is_named(tmp_path, booted):
    port, first, var_dir = booted.port, booted.proc, booted.var_dir
    wait_until(lambda: len(_stack_pids(var_dir)) >= 4, timeout=30, what="web, worker and beat")

    second = subprocess.run(
        ["make", "run"],
        cwd=ROOT,
        env=_env(tmp_path / "second", port),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert second.returncode != 0
    assert f"Port {port} on 127.0.0.1 is already in use" in second.stdout + second.stderr
    assert _healthy(port)  # the first stack is untouched

    os.killpg(first.pid, signal.SIGKILL)
    wait_until(lambda: not _stack_pids(var_dir), timeout=5, what="web, worker and beat to go")
    assert not _healthy(port)


def test_a_newcomers_make_run_finds_the_flags_podman_needs_and_runs_container_jobs(tmp_path):
    """A clean environment on this machine: LOCAL_RUNTIME auto (podman), no container flags;
    without them every container fails `error setting rlimit type 7`. With them, make run
    has the image fine-tunes run in before it serves (built here when missing or stale:
    minutes the first time on a machine, so the wait allows for it)."""
    port = free_port()
    env = _env(tmp_path, port, redis_url=None)
    for name in ("LOCAL_RUNTIME", "CONTAINER_GLOBAL_ARGS", "CONTAINER_RUN_ARGS"):
        env.pop(name, None)
    with make_run(tmp_path, port, env=env) as proc:
        wait_until(lambda: _healthy(port) or proc.poll() is not None, timeout=1200, what="make run")
        podman = container_runtime("podman")  # with this machine's flags (test settings)
        assert images.image_is_current(podman, images.trainer_image()), proc.log.read_text()
        assert proc.poll() is None, proc.log.read_text()
        log = proc.log.read_text()
        assert "podman could not start a container with the flags it was given" in log
        assert "error setting rlimit" in log
        assert (
            'CONTAINER_GLOBAL_ARGS="--runtime runc --cgroup-manager=cgroupfs" '
            'CONTAINER_RUN_ARGS="--ulimit nofile=1024:4096 --ulimit nproc=1000:1000", '
            "so this stack uses them"
        ) in log
        # The worker got them: a job in a container (of the image make run built) runs to
        # its end.
        job = ["python3", "-c", "import trainer; print('in a container')"]
        assert _submit(port, env, "in-a-container", images.trainer_image(), job) == "succeeded"


def test_make_run_stops_before_serving_when_no_flags_make_the_runtime_work(tmp_path):
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "podman").write_text(
        "#!/bin/sh\necho 'Error: this runtime refuses every container' >&2\nexit 126\n"
    )
    (fake / "podman").chmod(0o755)
    port = free_port()
    env = _env(tmp_path, port)
    env.update(LOCAL_RUNTIME="podman", PATH=f"{fake}{os.pathsep}{env['PATH']}")
    for name in ("CONTAINER_GLOBAL_ARGS", "CONTAINER_RUN_ARGS"):
        env.pop(name, None)

    result = subprocess.run(
        ["make", "run"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=240
    )
    output = result.stdout + result.stderr

    assert result.returncode != 0, output
    assert "podman cannot start a container on this host" in output
    assert "this runtime refuses every container" in output
    assert 'CONTAINER_GLOBAL_ARGS="--runtime runc --cgroup-manager=cgroupfs"' in output
    assert "LOCAL_RUNTIME=host" in output
    assert not re.search(r"^Trainyard: http://", output, flags=re.MULTILINE)  # no banner
    assert not _healthy(port)
    assert not _stack_pids(tmp_path / "var")
