"""What `trainyard apply -f` stands on: the job file's JSON Schema, served for editors, and
the fine-tune's dry run beside the container job's."""

import jsonschema
import pytest
from rest_framework.test import APIClient

from apps.jobs.models import Job

pytestmark = pytest.mark.django_db

CONTAINER_FILE = {
    "name": "train",
    "compute": {"accelerator": "cpu", "gpu_count": 1, "ephemeral_disk_gb": 10},
    "container": {"image": "python:3.11-slim", "command": ["python", "train.py"]},
    "limits": {"max_cost_usd": 2, "max_runtime_hours": None},
}
FINETUNE_FILE = {
    "kind": "finetune",
    "project": "vision",
    "name": "ft",
    "model": "/models/tiny",
    "dataset": "/data/alpaca.jsonl",
    "dataset_format": "alpaca",
    "learning_rate": 0.0002,
    "compute": {"accelerator": "cpu", "gpu_count": 1, "ephemeral_disk_gb": 20},
}


@pytest.fixture(scope="module")
def schema(django_db_blocker):
    from apps.jobs.api.job_file import job_file_schema

    with django_db_blocker.unblock():
        return job_file_schema()


def test_any_member_reads_the_schema_even_without_compute(api_client_for, org):
    org.compute_enabled = False
    org.save()
    response = api_client_for(org, role="viewer").get("/api/v1/compute/jobs/schema")
    assert response.status_code == 200
    assert response.json()["title"] == "Trainyard job file"
    assert APIClient().get("/api/v1/compute/jobs/schema").status_code == 401


@pytest.mark.parametrize("document", [CONTAINER_FILE, FINETUNE_FILE], ids=["container", "finetune"])
def test_a_valid_file_passes_the_schema(schema, document):
    jsonschema.validate(document, schema)


@pytest.mark.parametrize(
    ("change", "where"),
    [
        (
            {"compute": {"accelerator": "cpu", "gpu_count": 1, "ephemeral_disk_gb": 10, "gpus": 2}},
            "gpus",
        ),
        ({"contianer": {}}, "contianer"),
        ({"kind": "sweep"}, "sweep"),
        ({"limits": {"max_cost_usd": "lots"}}, "lots"),
    ],
    ids=["typo-in-compute", "typo-at-top", "unknown-kind", "not-an-amount"],
)
def test_a_file_with_a_mistake_fails_the_schema(schema, change, where):
    with pytest.raises(jsonschema.ValidationError) as raised:
        jsonschema.validate({**CONTAINER_FILE, **change}, schema)
    assert where in str(raised.value)


def test_a_finetune_needs_its_project_in_the_file(schema):
    without = {key: value for key, value in FINETUNE_FILE.items() if key != "project"}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(without, schema)


def test_the_finetune_plan_creates_nothing_and_says_the_hold(api_client_for, org, project):
    body = {key: value for key, value in FINETUNE_FILE.items() if key not in ("kind", "project")}
    response = api_client_for(org).post(
        f"/api/v1/projects/{project.public_id}/finetunes/plan", body, format="json"
    )
    assert response.status_code == 200, response.json()
    assert set(response.json()) == {"offer", "summary", "offers", "hold_usd"}
    bad = api_client_for(org).post(
        f"/api/v1/projects/{project.public_id}/finetunes/plan",
        {**body, "learning_rate": 0},
        format="json",
    )
    assert (bad.status_code, bad.json()["error"]["param"]) == (400, "learning_rate")
    assert not Job.objects.exists()
