"""How the control plane reaches a server on an SSH host (a serve job's engine): a loopback
port here forwarded over SSH to the far host's loopback, shared by every caller, replaced
when it dies, and closed when the attempt is released. The far host is this machine, behind
a real sshd."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import httpx
import pytest

from apps.providers.backends import backend_for, serves_endpoints, ssh_forward
from apps.providers.models import Provider
from tests.live import free_port, wait_until

pytestmark = pytest.mark.django_db(transaction=True, serialized_rollback=True)


@pytest.fixture
def far_server(tmp_path):
    """An HTTP server on the far host's loopback (here), serving one file."""
    (tmp_path / "hello.txt").write_text("from the far side")
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_until(lambda: _get(f"http://127.0.0.1:{port}/hello.txt"), what="the far server")
    yield port
    process.kill()
    process.wait()


def _get(url: str) -> str | None:
    try:
        return httpx.get(url, timeout=2).text
    except httpx.HTTPError:
        return None


def test_a_far_server_is_reached_through_one_shared_forward(ssh_provider, far_server):
    assert serves_endpoints(ssh_provider)
    assert not serves_endpoints(Provider(kind=Provider.Kind.SLURM))
    handle = {"workdir": "/far/work/job_x/attempt-1"}
    url = backend_for(ssh_provider).endpoint_url(handle, far_server)

    assert url.startswith("http://127.0.0.1:") and not url.endswith(f":{far_server}")
    assert _get(f"{url}/hello.txt") == "from the far side"
    # Another process of the control plane (a fresh backend) gets the same forward.
    assert backend_for(ssh_provider).endpoint_url(handle, far_server) == url

    # A forward that died is replaced on the next call.
    record = next(ssh_provider_state(ssh_provider).glob("*.json"))
    pid = int(json.loads(record.read_text())["pid"])
    os.killpg(pid, signal.SIGKILL)
    wait_until(lambda: _get(f"{url}/hello.txt") is None, what="the forward to die")
    again = backend_for(ssh_provider).endpoint_url(handle, far_server)
    assert _get(f"{again}/hello.txt") == "from the far side"

    # Releasing the attempt closes its forwards.
    backend = backend_for(ssh_provider)
    assert ssh_forward.close(backend.transport, handle["workdir"]) == 1
    deadline = time.monotonic() + 5
    while _get(f"{again}/hello.txt") is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _get(f"{again}/hello.txt") is None


def ssh_provider_state(provider):
    backend = backend_for(provider)
    return backend.transport.state_dir / backend.transport.digest / "forwards"
