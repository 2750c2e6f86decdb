"""What people see of preemption: the job page's attempts, the Jobs tab, the job API, and
the operators' reclaim endpoint."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from apps.accounts import services as account_services
from apps.accounts.models import Role
from apps.jobs.execution import dispatch, reports
from apps.jobs.models import Attempt, Job
from apps.secrets import services as secret_services
from tests.factories import UserFactory
from tests.jobs.helpers import make_job, running
from tests.jobs.helpers import submit_on as submit

pytestmark = pytest.mark.django_db


def preempted_pair(org_of_victim, org_of_standard, slots):
    """A preemptible job displaced by a standard one, its first attempt ended."""
    slots(1)
    victim = running(submit(org_of_victim, slots, priority="preemptible"))
    standard = submit(org_of_standard, slots)
    dispatch.allocate(standard.pk)
    reports.runner_exited(victim.pk, 0)
    return Job.objects.get(pk=victim.job_id), standard


def test_the_job_page_lists_attempts_and_who_displaced_them(client_for, member, org, slots):
    victim, standard = preempted_pair(org, org, slots)
    body = client_for(member).get(f"/o/acme/jobs/{victim.public_id}/").content.decode()
    attempts = body.split('id="job-attempts"')[1].split("</table>")[0]
    assert "preempted by" in attempts
    assert f'href="/o/acme/jobs/{standard.public_id}/"' in attempts
    assert "(1 min)" in attempts  # billed for its own minutes, at least one
    assert 'class="badge state-preempted"' in body
    assert 'id="chart-resumes"' in body


def test_another_orgs_displacing_job_is_not_named(client_for, member, org, other_org, slots):
    victim, standard = preempted_pair(org, other_org, slots)
    body = client_for(member).get(f"/o/acme/jobs/{victim.public_id}/").content.decode()
    assert standard.public_id not in body
    assert "a standard job of another organization" in body
    api = APIClient()
    _, key = account_services.api_key_create(organization=org, name="k")
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    data = api.get(f"/api/v1/compute/jobs/{victim.public_id}").json()
    assert data["state"] == "preempted" and data["reason"] == "preempted_by"
    assert data["attempts"][0]["preempted_by"] is None
    assert standard.public_id not in str(
        api.get(f"/api/v1/compute/jobs/{victim.public_id}/events").json()
    )


def test_the_jobs_tab_shows_a_preempted_job_as_such(client_for, member, org, project, slots):
    slots(1)
    job = make_job(
        org,
        project=project.public_id,
        name="spot-run",
        priority_class="preemptible",
        compute={"accelerator": slots.accelerator, "gpu_count": 1, "ephemeral_disk_gb": 1},
    )
    attempt = running(job)
    Attempt.objects.filter(pk=attempt.pk).update(reclaim_reason="reclaimed")  # the provider's
    reports.runner_exited(attempt.pk, 143)
    client = client_for(member)
    body = client.get("/o/acme/projects/vision/").content.decode()
    row = body.split(f'id="job-row-{job.public_id}"')[1].split("</tr>")[0]
    assert 'data-state="preempted"' in body and "Preempted" in row
    assert "waiting to resume" in row and 'title="The provider reclaimed its hardware."' in row
    filtered = client.get("/o/acme/projects/vision/?state=preempted").content.decode()
    assert filtered.count('id="job-row-') == 1


@pytest.fixture
def reclaimable(org, slots):
    slots(1)
    return running(submit(org, slots)).job


def reclaim(client, job):
    return client.post(f"/api/v1/operator/jobs/{job.public_id}/reclaim")


def test_a_staff_user_reclaims_a_running_job(reclaimable):
    client = APIClient()
    client.force_authenticate(UserFactory(is_staff=True))
    response = reclaim(client, reclaimable)
    assert response.status_code == 202
    assert response.json()["id"] == reclaimable.public_id
    attempt = Attempt.objects.get(job=reclaimable)
    assert attempt.reclaim_reason == "reclaimed"
    # The workload's exit, whatever its code, is the reclaim.
    reports.runner_exited(attempt.pk, 137)
    assert Job.objects.get(pk=reclaimable.pk).reason == "reclaimed"


def test_no_api_key_may_reclaim_whoever_made_it(org, other_org, client_for, reclaimable):
    staff = UserFactory(is_staff=True)
    superuser = UserFactory(is_staff=True, is_superuser=True)
    keys = [
        account_services.api_key_create(organization=org, name="o", role=Role.OWNER)[1],
        account_services.api_key_create(
            organization=org, name="ops", role=Role.OWNER, created_by=staff
        )[1],
        account_services.api_key_create(
            organization=other_org, name="v", role=Role.VIEWER, created_by=superuser
        )[1],
    ]
    client = APIClient()
    for key in keys:
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
        refused = reclaim(client, reclaimable)
        assert refused.status_code == 403
        assert refused.json()["error"]["type"] == "permission_denied"
        assert reclaimable.public_id not in refused.content.decode()
    assert Attempt.objects.get(job=reclaimable).reclaim_reason == ""
    # The same staff user signed in with a session is an operator.
    assert reclaim(client_for(staff), reclaimable).status_code == 202


def test_a_signed_in_non_staff_user_is_refused(org, admin, client_for, reclaimable):
    refused = reclaim(client_for(admin), reclaimable)
    assert refused.status_code == 403
    assert refused.json()["error"]["type"] == "permission_denied"
    assert Attempt.objects.get(job=reclaimable).reclaim_reason == ""


def test_an_inactive_staff_user_is_refused(reclaimable):
    client = APIClient()
    client.force_authenticate(UserFactory(is_staff=True, is_active=False))
    assert reclaim(client, reclaimable).status_code == 403


def test_the_reclaim_answer_shows_no_container_env_command_or_secret_refs(org, slots, client_for):
    slots(1)
    secret = secret_services.secret_create(
        organization=org, name="hub", data={"HF_TOKEN": "hf_value"}
    )
    job = make_job(
        org,
        name="private-run-name",
        compute={"accelerator": slots.accelerator, "gpu_count": 1, "ephemeral_disk_gb": 1},
        container={
            "image": "python:3.11-slim",
            "command": ["python", "-c", "print('cmd-marker-7731')"],
            "env": {"DB_PASSWORD": "env-marker-5521"},
            "secret_env": {"HF_TOKEN": {"secret_id": secret.public_id, "key": "HF_TOKEN"}},
        },
    )
    running(job)
    response = reclaim(client_for(UserFactory(is_staff=True)), job)
    assert response.status_code == 202
    body = response.json()
    assert body["id"] == job.public_id
    assert body["state"] == Job.objects.get(pk=job.pk).state
    assert set(body) == {
        "id",
        "kind",
        "priority_class",
        "state",
        "reason",
        "hardware",
        "preemption_count",
        "attempts",
    }
    text = response.content.decode()
    for marker in (
        "cmd-marker-7731",
        "env-marker-5521",
        "DB_PASSWORD",
        "HF_TOKEN",
        secret.public_id,
        "private-run-name",
        "python:3.11-slim",
    ):
        assert marker not in text


def test_reclaim_refuses_members_strangers_and_jobs_with_nothing_running(org, member, reclaimable):
    client = APIClient()
    assert reclaim(client, reclaimable).status_code == 401
    client.force_authenticate(member)
    assert reclaim(client, reclaimable).status_code == 403
    client.force_authenticate(UserFactory(is_staff=True))
    waiting = make_job(org)
    response = reclaim(client, waiting)
    assert response.status_code == 409
    assert response.json()["error"]["type"] == "job_not_running"
    assert client.post("/api/v1/operator/jobs/job_nope/reclaim").status_code == 404
