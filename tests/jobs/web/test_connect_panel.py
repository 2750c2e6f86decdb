"""The job page's Connect panel, as the server renders it: the SSH command and host key while
the job can still run, the terminal for members only, nothing once the job has ended; and
the marker the page's state pushes carry so the panel follows the job live."""

import pytest

from apps.jobs.live import partials
from apps.jobs.shell.hostkey import gateway_host_key
from apps.jobs.states import JobState
from tests.jobs.helpers import make_job, running

pytestmark = pytest.mark.django_db


@pytest.fixture
def gateway(settings):
    settings.SSH_GATEWAY_PORT = 2222
    settings.SSH_GATEWAY_HOST = ""
    return settings


def _running(org):
    job = make_job(org)
    running(job)
    return job


def _page(client, job) -> str:
    response = client.get(f"/o/acme/jobs/{job.public_id}/")
    assert response.status_code == 200
    return response.content.decode()


def test_a_member_sees_the_ssh_command_host_key_and_the_terminal(client_for, member, org, gateway):
    job = _running(org)
    body = _page(client_for(member), job)
    assert 'id="connect-panel"' in body and 'data-running="true"' in body
    assert f'<code id="ssh-command">ssh -p 2222 {job.public_id}@testserver</code>' in body
    assert f">{gateway_host_key().fingerprint}</code>" in body
    assert 'data-copy-target="ssh-command"' in body
    assert "/o/acme/settings/#ssh-keys" in body  # where a member registers a key
    assert '<button type="button" id="terminal-open"' in body
    assert f'data-terminal-url="/ws/jobs/{job.public_id}/terminal/"' in body
    assert "vendor/xterm/xterm-6.0.0.js" in body and "js/terminal.js" in body
    assert "Viewers cannot open sessions" not in body


def test_the_gateway_host_setting_names_the_host(client_for, admin, org, gateway):
    gateway.SSH_GATEWAY_HOST = "ssh.example.org"
    job = _running(org)
    assert f"ssh -p 2222 {job.public_id}@ssh.example.org<" in _page(client_for(admin), job)


def test_the_page_and_the_api_name_the_same_host(client_for, api_client_for, member, org, gateway):
    gateway.ALLOWED_HOSTS = ["trainyard.example", "[::1]"]
    job = _running(org)
    client, api = client_for(member), api_client_for(org)
    for host in ("trainyard.example:8000", "[::1]:8000"):
        shown = api.get(f"/api/v1/compute/jobs/{job.public_id}", HTTP_HOST=host)
        command = shown.json()["ssh"]["command"]
        assert (
            f'<code id="ssh-command">{command}</code>'
            in client.get(f"/o/acme/jobs/{job.public_id}/", HTTP_HOST=host).content.decode()
        )


def test_without_a_gateway_there_is_no_command_but_the_terminal(client_for, member, org, settings):
    settings.SSH_GATEWAY_PORT = 0
    job = _running(org)
    body = _page(client_for(member), job)
    assert 'id="ssh-command"' not in body
    assert 'id="terminal-open"' in body


def test_a_viewer_sees_the_command_and_a_note_but_no_terminal(client_for, viewer, org, gateway):
    job = _running(org)
    body = _page(client_for(viewer), job)
    assert f"ssh -p 2222 {job.public_id}@testserver" in body
    assert "Viewers cannot open sessions into a job" in body
    assert 'id="terminal-open"' not in body and 'id="terminal"' not in body
    assert "xterm-6.0.0.js" not in body
    assert "/o/acme/settings/" not in body.split('id="connect-panel"')[1].split("</section>")[0]


def test_a_job_not_running_yet_has_the_panel_hidden_until_it_runs(client_for, member, org, gateway):
    job = make_job(org)
    body = _page(client_for(member), job)
    panel = body.split('id="connect-panel"')[1].split(">")[0]
    assert 'data-running="false"' in panel and " hidden" in panel
    assert '<span id="connect-state" data-state="requested" hidden>' in body


@pytest.mark.parametrize("state", [JobState.TERMINATED, JobState.FAILED])
def test_an_ended_job_has_no_panel(client_for, member, org, gateway, state):
    job = make_job(org, state=state)
    body = _page(client_for(member), job)
    assert 'id="connect-panel"' not in body
    assert "js/terminal.js" not in body and "ssh -p" not in body


def test_state_pushes_and_catch_ups_carry_the_marker_the_panel_follows(org):
    job = _running(org)
    job = partials.job_for_push(job.pk)
    marker = '<span id="connect-state" data-state="running" hidden hx-swap-oob="true">'
    pushed = partials.render_push(
        job, seq=job.live_seq, event_ids=[], log_ids=[], metric_ids=[], state_changed=True
    )
    assert marker in pushed
    assert marker in partials.render_catch_up(job, after_event=0, after_log=0, after_metric=0)
