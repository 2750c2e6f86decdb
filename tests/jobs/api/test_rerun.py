"""Re-running a job through the API: `POST /api/v1/compute/jobs/{id}/rerun`."""

import pytest

from apps.finetunes import payloads
from apps.jobs.models import Job
from tests.jobs.helpers import job_body, make_job

pytestmark = pytest.mark.django_db

FINETUNE = {
    "name": "ft",
    "model": "/models/tiny",
    "dataset": "/data/alpaca.jsonl",
    "dataset_format": "alpaca",
    "max_steps": 40,
    "learning_rate": 0.0002,
}


@pytest.fixture
def api(api_client_for, org):
    return api_client_for(org)


def rerun(api, job_id, overrides=None, key="rerun-1"):
    headers = {"HTTP_IDEMPOTENCY_KEY": key} if key else {}
    return api.post(
        f"/api/v1/compute/jobs/{job_id}/rerun", overrides or {}, format="json", **headers
    )


def _spec_without(spec: dict, *paths: tuple[str, ...]) -> dict:
    copy = {**spec, "container": dict(spec["container"]), "limits": dict(spec["limits"])}
    for path in paths:
        node = copy
        for part in path[:-1]:
            node = node[part]
        node.pop(path[-1])
    return copy


def test_a_rerun_with_an_override_differs_only_there_and_links_both_ways(api, org):
    original = make_job(
        org,
        state="succeeded",
        container={
            "image": "python:3.11-slim",
            "command": ["python", "train.py"],
            "env": {"LR": "1e-4"},
        },
        limits={"max_cost_usd": "2.5", "max_runtime_hours": 3},
        priority_class="preemptible",
    )

    response = rerun(api, original.public_id, {"container": {"env": {"LR": "2e-4"}}})

    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["rerun_of"] == original.public_id
    assert body["state"] == "requested"
    assert (body["name"], body["project"], body["kind"]) == (
        original.name,
        original.project.public_id,
        "container",
    )
    new = Job.objects.get(public_id=body["id"])
    assert new.spec["container"]["env"] == {"LR": "2e-4"}
    assert _spec_without(new.spec, ("container", "env")) == _spec_without(
        original.spec, ("container", "env")
    )
    assert new.rerun_of == original
    listed = api.get(f"/api/v1/compute/jobs/{original.public_id}").json()
    assert listed["reruns"] == [body["id"]]
    assert listed["rerun_of"] is None
    page = api.get("/api/v1/compute/jobs").json()["data"]
    assert {job["id"]: job["reruns"] for job in page} == {
        body["id"]: [],
        original.public_id: [body["id"]],
    }


def test_a_rerun_without_a_body_runs_the_same_request_again(api, org):
    original = make_job(org, state="failed")
    response = api.post(
        f"/api/v1/compute/jobs/{original.public_id}/rerun", HTTP_IDEMPOTENCY_KEY="empty"
    )
    assert response.status_code == 201, response.json()
    new = Job.objects.get(public_id=response.json()["id"])
    assert new.spec == original.spec
    assert new.pk != original.pk
    listed = api.post(
        f"/api/v1/compute/jobs/{original.public_id}/rerun",
        [],
        format="json",
        HTTP_IDEMPOTENCY_KEY="list",
    )
    assert (listed.status_code, listed.json()["error"]["type"]) == (400, "invalid_request")


def test_a_finetune_rerun_overrides_its_trainer_config(api, org, project):
    created = api.post(
        f"/api/v1/projects/{project.public_id}/finetunes",
        FINETUNE,
        format="json",
        HTTP_IDEMPOTENCY_KEY="ft-1",
    )
    assert created.status_code == 201, created.json()
    original = Job.objects.get(public_id=created.json()["id"])

    response = rerun(api, original.public_id, {"learning_rate": 0.0001})

    assert response.status_code == 201, response.json()
    new = Job.objects.get(public_id=response.json()["id"])
    assert new.kind == "finetune"
    assert new.project == project
    assert payloads.config_of(new) == {**payloads.config_of(original), "learning_rate": 0.0001}
    assert new.spec["compute"] == original.spec["compute"]
    assert response.json()["rerun_of"] == original.public_id


def test_a_bad_override_is_400_naming_the_field_and_creates_nothing(api, org):
    original = make_job(org, state="succeeded")
    response = rerun(api, original.public_id, {"compute": {"gpu_count": 0}})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "compute.gpu_count"
    typo = rerun(api, original.public_id, {"contianer": {}}, key="rerun-2")
    assert (typo.status_code, typo.json()["error"]["param"]) == (400, "contianer")
    assert Job.objects.count() == 1


def test_a_rerun_needs_an_idempotency_key_and_repeats_answer_the_same_job(api, org):
    original = make_job(org, state="succeeded")
    assert rerun(api, original.public_id, key=None).status_code == 400
    first = rerun(api, original.public_id, {"name": "again"})
    again = rerun(api, original.public_id, {"name": "again"})
    other = rerun(api, original.public_id, {"name": "another"})
    assert (first.status_code, again.status_code, other.status_code) == (201, 200, 409)
    assert again.json()["id"] == first.json()["id"]
    assert Job.objects.filter(rerun_of=original).count() == 1


def test_another_organizations_job_is_404(api, other_org):
    theirs = make_job(other_org, state="succeeded")
    response = rerun(api, theirs.public_id)
    assert response.status_code == 404
    assert response.json()["error"]["type"] == "not_found"
    assert Job.objects.count() == 1


def test_a_viewer_cannot_rerun(api_client_for, org):
    original = make_job(org, state="succeeded")
    response = rerun(api_client_for(org, role="viewer"), original.public_id)
    assert response.status_code == 403
    assert Job.objects.count() == 1


def test_the_job_file_is_kept_and_shown(api):
    text = "# yaml-language-server: $schema=x\nname: train\n"
    response = api.post(
        "/api/v1/compute/jobs",
        job_body(job_file={"name": "job.yaml", "content": text}),
        format="json",
        HTTP_IDEMPOTENCY_KEY="file-1",
    )
    assert response.status_code == 201, response.json()
    assert response.json()["job_file"] == {"name": "job.yaml", "content": text}
    job = Job.objects.get(public_id=response.json()["id"])
    assert (job.job_file_name, job.job_file) == ("job.yaml", text)
    assert "job_file" not in job.spec
    rerun_body = rerun(api, job.public_id).json()
    assert rerun_body["job_file"] is None
