"""Compute enabled is one rule, decided in `job_create` under the organization's row lock:
every way a job is made (the API, the New Job form, a Playground start, an endpoint deployed
by the API or from the Playground) refuses an organization without compute with
`tenant_disabled` and leaves no job, no hold and no half-made endpoint or server behind; and
a submit that read the organization before an admin switched compute off is refused too."""

from __future__ import annotations

import json

import pytest

from apps.billing.models import Transfer
from apps.core.errors import TenantDisabled
from apps.jobs import services
from apps.jobs.models import Job
from apps.playground.models import PlaygroundServer
from apps.serving.models import Endpoint
from tests.jobs.web.test_new_job_page import container_data
from tests.playground.conftest import BASE_MODEL

pytestmark = pytest.mark.django_db

CONTAINER_JOB = {
    "name": "train",
    "compute": {"accelerator": "cpu", "gpu_count": 1, "ephemeral_disk_gb": 10},
    "container": {"image": "python:3.11-slim", "command": ["true"]},
}


def _api(org, project, api_client_for, client_for, member, tuned) -> str:
    response = api_client_for(org).post(
        "/api/v1/compute/jobs", {**CONTAINER_JOB, "project": project.public_id}, format="json"
    )
    assert response.status_code == 403
    return response.json()["error"]["type"]


def _form(org, project, api_client_for, client_for, member, tuned) -> str:
    response = client_for(member).post(
        "/o/acme/projects/vision/jobs/new/", container_data(command="true")
    )
    assert response.status_code == 200  # the form again, saying why
    return response.content.decode()


def _playground_start(org, project, api_client_for, client_for, member, tuned) -> str:
    response = client_for(member).post(
        "/o/acme/projects/vision/playground/run",
        data=json.dumps(
            {"messages": [{"role": "user", "content": "Hi"}], "panes": [{"target": "base"}]}
        ),
        content_type="application/json",
    )
    assert response.status_code == 403, response.content
    return response.json()["error"]["type"]


def _endpoint_deploy(org, project, api_client_for, client_for, member, tuned) -> str:
    response = api_client_for(org).post(
        "/api/v1/endpoints",
        {
            "name": "support-bot",
            "project": project.public_id,
            "base_model": BASE_MODEL,
            "target": {"job": tuned.job.public_id},
        },
        format="json",
    )
    assert response.status_code == 403, response.content
    return response.json()["error"]["type"]


def _playground_deploy(org, project, api_client_for, client_for, member, tuned) -> str:
    response = client_for(member).post(
        "/o/acme/projects/vision/playground/deploy",
        {"artifact": f"art_{tuned.adapter.pk}", "name": "support-bot"},
        follow=True,
    )
    assert response.status_code == 200
    return response.content.decode()


@pytest.mark.parametrize(
    "door", [_api, _form, _playground_start, _endpoint_deploy, _playground_deploy]
)
def test_every_way_in_refuses_an_organization_without_compute_and_leaves_nothing(
    door, org, project, api_client_for, client_for, member, tuned
):
    jobs_before = Job.objects.count()
    org.compute_enabled = False
    org.save(update_fields=["compute_enabled"])

    answer = door(org, project, api_client_for, client_for, member, tuned)

    assert "tenant_disabled" in answer or "Compute is not enabled" in answer
    assert Job.objects.count() == jobs_before
    assert not Transfer.objects.filter(code=Transfer.Code.HOLD).exists()
    assert not Endpoint.objects.exists()
    assert not PlaygroundServer.objects.exists()


def test_a_submit_that_read_the_organization_before_compute_was_switched_off_is_refused(
    org, project
):
    stale = type(org).objects.get(pk=org.pk)  # read while compute is on
    type(org).objects.filter(pk=org.pk).update(compute_enabled=False)  # an admin, meanwhile

    with pytest.raises(TenantDisabled):
        services.job_create(
            organization=stale, payload={**CONTAINER_JOB, "project": project.public_id}
        )

    assert not Job.objects.filter(organization=org).exists()
    assert not Transfer.objects.filter(code=Transfer.Code.HOLD).exists()
