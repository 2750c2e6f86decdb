"""The job API's `ssh`: the SSH gateway's address while the job runs, null otherwise."""

from __future__ import annotations

import pytest

from apps.core.ssh_keys import parse_public_key
from apps.jobs.shell import hostkey
from apps.jobs.states import JobState
from tests.jobs.helpers import make_job

pytestmark = pytest.mark.django_db

JOBS = "/api/v1/compute/jobs"


@pytest.fixture
def gateway(settings, tmp_path):
    """A gateway on port 2222 with a host key of this test's own."""
    settings.SSH_GATEWAY_PORT = 2222
    settings.SSH_GATEWAY_HOST = ""
    settings.SSH_GATEWAY_HOST_KEY = tmp_path / "host_ed25519"
    hostkey.gateway_host_key.cache_clear()
    yield settings
    hostkey.gateway_host_key.cache_clear()


@pytest.fixture
def api(api_client_for, org):
    return api_client_for(org)


def test_a_running_job_shows_the_gateway_by_the_requests_host(api, org, gateway):
    gateway.ALLOWED_HOSTS = ["trainyard.example.com"]
    job = make_job(org, state=JobState.RUNNING)  # no access key: members' keys work too
    ssh = api.get(f"{JOBS}/{job.public_id}", HTTP_HOST="trainyard.example.com:8443").json()["ssh"]
    key = hostkey.gateway_host_key()
    assert ssh == {
        "host": "trainyard.example.com",
        "port": 2222,
        "user": job.public_id,
        "command": f"ssh -p 2222 {job.public_id}@trainyard.example.com",
        "host_key": key.public,
        "host_key_fingerprint": key.fingerprint,
    }
    assert key.public.startswith("ssh-ed25519 ")
    assert parse_public_key(ssh["host_key"]).fingerprint == ssh["host_key_fingerprint"]
    # The list says the same.
    listed = api.get(JOBS, HTTP_HOST="trainyard.example.com").json()["data"]
    assert listed[0]["ssh"] == ssh


def test_ssh_gateway_host_wins_over_the_request(api, org, gateway):
    gateway.SSH_GATEWAY_HOST = "ssh.example.net"
    job = make_job(org, state=JobState.RUNNING)
    ssh = api.get(f"{JOBS}/{job.public_id}").json()["ssh"]
    assert ssh["host"] == "ssh.example.net"
    assert ssh["command"] == f"ssh -p 2222 {job.public_id}@ssh.example.net"


def test_an_ipv6_host_loses_its_brackets_and_port(api, org, gateway):
    gateway.ALLOWED_HOSTS = ["[::1]"]
    job = make_job(org, state=JobState.RUNNING)
    assert api.get(f"{JOBS}/{job.public_id}", HTTP_HOST="[::1]:8000").json()["ssh"]["host"] == "::1"


@pytest.mark.parametrize(
    "state",
    [JobState.REQUESTED, JobState.PROVISIONING, JobState.FINALIZING, JobState.TERMINATED],
)
def test_null_unless_running(api, org, gateway, state):
    job = make_job(org, state=state, access={"ssh_public_key": hostkey.gateway_host_key().public})
    assert api.get(f"{JOBS}/{job.public_id}").json()["ssh"] is None


def test_null_without_a_gateway(api, org, gateway):
    gateway.SSH_GATEWAY_PORT = 0
    job = make_job(org, state=JobState.RUNNING)
    assert api.get(f"{JOBS}/{job.public_id}").json()["ssh"] is None


def test_the_schema_describes_the_field(client):
    schema = client.get("/api/schema/?format=json").json()
    ssh = schema["components"]["schemas"]["SshOut"]
    assert set(ssh["properties"]) == {
        "host",
        "port",
        "user",
        "command",
        "host_key",
        "host_key_fingerprint",
    }
    assert set(ssh["required"]) == set(ssh["properties"])
