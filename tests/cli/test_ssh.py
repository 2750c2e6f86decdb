"""`trainyard ssh` and `trainyard port-forward` against this test's API (a running job made
in the database), with a stand-in `ssh` first on PATH that records the argv it was given:
what these commands owe is the right ssh command line and the pinned host key (the gateway
itself is tested end to end elsewhere)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import httpx
import pytest
from django.test import Client

from apps.accounts import services as account_services
from apps.jobs.shell import hostkey
from apps.jobs.states import JobState
from tests.jobs.helpers import make_job
from trainyard_cli import client as cli_client
from trainyard_cli.commands.ssh import host_pattern
from trainyard_cli.main import run

pytestmark = pytest.mark.django_db

GATEWAY = "gw.example.test"


@pytest.fixture
def gateway(settings, tmp_path):
    settings.SSH_GATEWAY_PORT = 2222
    settings.SSH_GATEWAY_HOST = GATEWAY
    settings.SSH_GATEWAY_HOST_KEY = tmp_path / "gateway" / "host_ed25519"
    hostkey.gateway_host_key.cache_clear()
    yield settings
    hostkey.gateway_host_key.cache_clear()


def _new_host_key(settings, tmp_path, name: str) -> hostkey.HostKey:
    settings.SSH_GATEWAY_HOST_KEY = tmp_path / name / "host_ed25519"
    hostkey.gateway_host_key.cache_clear()
    return hostkey.gateway_host_key()


@pytest.fixture
def stand_in_ssh(tmp_path, monkeypatch):
    """An `ssh` first on PATH that writes its argv (JSON) to a file and exits 7. Returns
    the file; it does not exist while ssh has not been run."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = tmp_path / "ssh-argv.json"
    script = bin_dir / "ssh"
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, sys\n"
        f"open({str(record)!r}, 'w').write(json.dumps(sys.argv))\n"
        "sys.exit(7)\n"
    )
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    return record


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    return tmp_path / "home"


@pytest.fixture
def cli(org, home, monkeypatch):
    """Run a `trainyard` command line in-process against this test's API; its exit code."""
    _, key = account_services.api_key_create(organization=org, name="cli")
    monkeypatch.setenv("TRAINYARD_URL", "https://trainyard.test")
    monkeypatch.setenv("TRAINYARD_API_KEY", key)
    monkeypatch.setattr(cli_client, "RETRY_DELAY_S", 0)
    django = Client()

    def forward(request: httpx.Request) -> httpx.Response:
        answer = django.generic(
            request.method,
            request.url.raw_path.decode(),
            data=request.read(),
            content_type=request.headers.get("content-type", "application/json"),
            secure=True,
            headers={
                name: value
                for name, value in request.headers.items()
                if name.lower() in ("authorization", "accept")
            },
        )
        return httpx.Response(
            answer.status_code,
            headers={"content-type": answer.get("Content-Type", "application/json")},
            content=answer.content,
        )

    def invoke(*argv: str) -> int:
        return run(list(argv), transport=httpx.MockTransport(forward))

    return invoke


@pytest.fixture
def job(org):
    return make_job(org, state=JobState.RUNNING)


def _known_hosts(home: Path) -> Path:
    return home / ".config" / "trainyard" / "known_hosts"


def _prefix(home: Path, stand_in: Path) -> list[str]:
    return [
        str(stand_in.parent / "bin" / "ssh"),
        "-p",
        "2222",
        "-o",
        f"UserKnownHostsFile={_known_hosts(home)}",
        "-o",
        "StrictHostKeyChecking=yes",
    ]


def test_ssh_runs_openssh_with_the_gateway_and_the_pinned_key(
    cli, gateway, job, home, stand_in_ssh, capsys
):
    code = cli("ssh", job.public_id, "--", "nvidia-smi", "-L", "--", "x y")
    assert code == 7  # ssh's status is ours
    argv = json.loads(stand_in_ssh.read_text())
    assert argv == [
        *_prefix(home, stand_in_ssh),
        "--",
        f"{job.public_id}@{GATEWAY}",
        "nvidia-smi",
        "-L",
        "--",
        "x y",
    ]
    key = hostkey.gateway_host_key()
    assert _known_hosts(home).read_text() == f"[{GATEWAY}]:2222 {key.public}\n"
    assert f"Pinned the SSH gateway host key {key.fingerprint}" in capsys.readouterr().err


def test_a_shell_with_an_identity(cli, gateway, job, home, stand_in_ssh, tmp_path):
    identity = tmp_path / "id_ed25519"
    identity.write_text("not read by us")
    assert cli("ssh", job.public_id, "--identity", str(identity)) == 7
    argv = json.loads(stand_in_ssh.read_text())
    assert argv == [
        *_prefix(home, stand_in_ssh),
        "-i",
        str(identity),
        "--",
        f"{job.public_id}@{GATEWAY}",
    ]
    assert cli("ssh", job.public_id, "-i", str(tmp_path / "missing")) == 2


@pytest.mark.parametrize(
    ("ports", "forward"), [("8888", "8888:localhost:8888"), ("9000:80", "9000:localhost:80")]
)
def test_port_forward_says_what_it_forwards(
    cli, gateway, job, home, stand_in_ssh, capsys, ports, forward
):
    assert cli("port-forward", job.public_id, ports) == 7
    argv = json.loads(stand_in_ssh.read_text())
    assert argv == [
        *_prefix(home, stand_in_ssh),
        "-N",
        "-o",
        "ExitOnForwardFailure=yes",
        "-L",
        forward,
        "--",
        f"{job.public_id}@{GATEWAY}",
    ]
    local, remote = forward.split(":localhost:")
    assert f"Forwarding localhost:{local} to port {remote} on {job.public_id}" in (
        capsys.readouterr().err
    )


@pytest.mark.parametrize("ports", ["0", "x", "80:", "80:70000", "1:2:3"])
def test_port_forward_refuses_bad_ports(cli, gateway, job, stand_in_ssh, capsys, ports):
    assert cli("port-forward", job.public_id, ports) == 2
    assert "expected LOCAL[:REMOTE]" in capsys.readouterr().err
    assert not stand_in_ssh.exists()


def test_a_job_that_is_not_running_is_a_clear_error(cli, gateway, org, stand_in_ssh, capsys):
    waiting = make_job(org)
    assert cli("ssh", waiting.public_id) == 1
    assert f"{waiting.public_id} is requested: only a running job" in capsys.readouterr().err
    assert cli("port-forward", waiting.public_id, "8080") == 1
    assert not stand_in_ssh.exists()


def test_no_gateway_is_a_clear_error(cli, gateway, job, stand_in_ssh, capsys):
    gateway.SSH_GATEWAY_PORT = 0
    assert cli("ssh", job.public_id) == 1
    assert "runs no SSH gateway" in capsys.readouterr().err
    assert not stand_in_ssh.exists()


def test_another_orgs_job_is_the_apis_404(cli, gateway, other_org, stand_in_ssh, capsys):
    theirs = make_job(other_org, state=JobState.RUNNING)
    assert cli("ssh", theirs.public_id) == 2
    assert not stand_in_ssh.exists()


def test_no_ssh_binary_is_a_clear_error(cli, gateway, job, tmp_path, monkeypatch, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    assert cli("ssh", job.public_id) == 1
    assert "No `ssh` command on PATH" in capsys.readouterr().err


def test_a_changed_host_key_is_refused_until_accepted(
    cli, gateway, job, home, stand_in_ssh, tmp_path, capsys
):
    known_hosts = _known_hosts(home)
    known_hosts.parent.mkdir(parents=True)
    known_hosts.write_text("[other.example]:22 ssh-ed25519 AAAAkept\n")
    first = hostkey.gateway_host_key()
    assert cli("ssh", job.public_id) == 7
    pinned = known_hosts.read_text()
    assert pinned == f"[other.example]:22 ssh-ed25519 AAAAkept\n[{GATEWAY}]:2222 {first.public}\n"

    # The same key again: nothing to write, nothing said.
    stand_in_ssh.unlink()
    capsys.readouterr()
    assert cli("ssh", job.public_id) == 7
    assert known_hosts.read_text() == pinned
    assert "Pinned" not in capsys.readouterr().err

    # Another key: refused like OpenSSH refuses, ssh not run, the pin left as it was.
    stand_in_ssh.unlink()
    second = _new_host_key(gateway, tmp_path, "rotated")
    assert cli("ssh", job.public_id) == 1
    err = capsys.readouterr().err
    assert f"host key for [{GATEWAY}]:2222 has changed" in err
    assert first.fingerprint in err and second.fingerprint in err
    assert "--accept-new-host-key" in err
    assert not stand_in_ssh.exists()
    assert cli("port-forward", job.public_id, "8080") == 1
    assert known_hosts.read_text() == pinned

    # Accepted: replaced in place, the other gateway's line kept.
    assert cli("ssh", job.public_id, "--accept-new-host-key") == 7
    assert known_hosts.read_text() == (
        f"[other.example]:22 ssh-ed25519 AAAAkept\n[{GATEWAY}]:2222 {second.public}\n"
    )
    assert "Replaced the pinned SSH gateway host key" in capsys.readouterr().err


def test_the_request_host_is_used_without_ssh_gateway_host(cli, gateway, job, stand_in_ssh):
    gateway.SSH_GATEWAY_HOST = ""
    assert cli("ssh", job.public_id) == 7
    assert json.loads(stand_in_ssh.read_text())[-1] == f"{job.public_id}@testserver"


def test_known_hosts_names_port_22_as_openssh_does():
    assert host_pattern("GW.Example", 22) == "gw.example"
    assert host_pattern("gw.example", 2222) == "[gw.example]:2222"
    assert host_pattern("::1", 2222) == "[::1]:2222"
