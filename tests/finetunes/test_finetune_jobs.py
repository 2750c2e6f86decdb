"""Managed fine-tunes through the API, self-grading, and artifacts for people to download."""

import hashlib
import json
from datetime import UTC, datetime

import pytest
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.test import Client

from apps.finetunes import payloads
from apps.hub import repos as hub_repos
from apps.jobs import services
from apps.jobs.execution import dispatch, reports, supervision
from apps.jobs.models import Artifact, Job, JobEvent
from apps.jobs.states import JobState
from apps.jobs.telemetry import ingestion
from runner import protocol
from tests.factories import ProjectFactory, uploaded_dataset
from tests.jobs.helpers import make_job

pytestmark = pytest.mark.django_db

CONFIG = {"model": "/models/tiny", "dataset": "/data/alpaca.jsonl", "dataset_format": "alpaca"}


@pytest.fixture(autouse=True)
def _media(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path / "media"


def _post(api, project, body, key="ft-1"):
    return api.post(
        f"/api/v1/projects/{project.public_id}/finetunes",
        body,
        format="json",
        HTTP_IDEMPOTENCY_KEY=key,
    )


def test_the_api_starts_a_finetune_running_the_trainer(api_client_for, org, project):
    response = _post(api_client_for(org), project, {"name": "ft", **CONFIG, "max_steps": 40})
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["kind"], body["project"], body["state"]) == (
        "finetune",
        project.public_id,
        "requested",
    )
    job = Job.objects.get(public_id=body["id"])
    assert payloads.config_of(job) == {
        **CONFIG,
        "max_samples": None,
        "max_steps": 40,
        "learning_rate": 0.0002,
        "seed": 42,
        "save_steps": 10,
    }
    assert "python -m trainer --config-json" in payloads.SCRIPT
    assert job.spec["container"]["image"] == "localhost/trainyard-trainer:0.1.0"
    again = _post(api_client_for(org), project, {"name": "ft", **CONFIG, "max_steps": 40})
    assert again.status_code in {200, 201}


@pytest.mark.parametrize(
    ("change", "param"),
    [
        ({"dataset_format": "csvish"}, "dataset_format"),
        ({"learning_rate": 0}, "learning_rate"),
        ({"max_steps": 0}, "max_steps"),
        ({"model": None}, "model"),
    ],
)
def test_a_bad_finetune_request_names_its_field(api_client_for, org, project, change, param):
    response = _post(api_client_for(org), project, {"name": "ft", **CONFIG, **change})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == param
    assert not Job.objects.exists()


def test_the_api_takes_an_uploaded_dataset_by_id_and_its_format(api_client_for, org, project):
    toy = uploaded_dataset(project, name="Toy")
    body = {"name": "ft", "model": "/models/tiny", "dataset": toy.public_id}

    response = _post(api_client_for(org), project, {**body, "priority_class": "preemptible"})

    assert response.status_code == 201, response.json()
    job = Job.objects.get(public_id=response.json()["id"])
    config = payloads.config_of(job)
    assert (config["dataset"], config["dataset_format"]) == (toy.public_id, "alpaca")
    assert job.priority_class == "preemptible"


@pytest.mark.parametrize("whose", ["unknown", "another project of the org", "another org"])
def test_a_dataset_id_that_is_not_the_projects_is_400(
    api_client_for, org, project, other_project, whose
):
    if whose == "unknown":
        dataset_id = "ds_0000000000000000"
    else:
        owner = ProjectFactory(organization=org) if whose.endswith("org") else other_project
        dataset_id = uploaded_dataset(owner).public_id

    response = _post(api_client_for(org), project, {**CONFIG, "name": "ft", "dataset": dataset_id})

    assert response.status_code == 400
    assert response.json() == {
        "error": {
            "type": "invalid_request",
            "message": f"No uploaded dataset {dataset_id} in project Vision.",
            "param": "dataset",
        }
    }
    assert not Job.objects.exists()


def test_an_uploaded_dataset_in_another_format_is_400(api_client_for, org, project):
    toy = uploaded_dataset(project, name="Toy")
    body = {**CONFIG, "name": "ft", "dataset": toy.public_id, "dataset_format": "chatml"}
    response = _post(api_client_for(org), project, body)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "dataset_format"
    assert not Job.objects.exists()


def test_a_hub_or_path_dataset_still_needs_its_format(api_client_for, org, project):
    body = {"name": "ft", "model": "/models/tiny", "dataset": "tatsu-lab/alpaca"}
    response = _post(api_client_for(org), project, body)
    assert response.status_code == 400
    assert response.json()["error"] == {
        "type": "invalid_request",
        "message": "This field is required.",
        "param": "dataset_format",
    }


@pytest.mark.parametrize(
    ("change", "param", "message"),
    [
        ({"model": "acme/nope"}, "model", "There is no model repository acme/nope"),
        ({"model": "acme/tiny@v9"}, "model", "acme/tiny has no branch, tag or commit v9."),
        ({"dataset": "acme/tiny"}, "dataset", "There is no dataset repository acme/tiny"),
        ({"dataset": "acme/greetings@nope"}, "dataset", "acme/greetings has no branch, tag"),
    ],
)
def test_a_model_or_dataset_missing_from_the_organization_s_hub_is_400(
    api_client_for, org, project, change, param, message
):
    tiny = hub_repos.create_repo(org, "model", "tiny")
    hub_repos.create_ref(tiny, "tag", "v1", hub_repos.resolve(tiny, "main"))
    hub_repos.create_repo(org, "dataset", "greetings")
    body = {"name": "ft", "dataset_format": "alpaca", **change}
    body.setdefault("model", "acme/tiny@v1")
    body.setdefault("dataset", "acme/greetings")

    response = _post(api_client_for(org), project, body)

    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["type"], error["param"]) == ("invalid_request", param)
    assert error["message"].startswith(message)
    assert not Job.objects.exists()


def test_hub_repositories_at_a_revision_are_taken(api_client_for, org, other_org, project):
    tiny = hub_repos.create_repo(org, "model", "tiny")
    hub_repos.create_ref(tiny, "tag", "v1", hub_repos.resolve(tiny, "main"))
    hub_repos.create_repo(org, "dataset", "greetings")
    hub_repos.create_repo(other_org, "dataset", "theirs")  # another namespace: not checked
    body = {"name": "ft", "model": "acme/tiny@v1", "dataset": "acme/greetings@main"}

    response = _post(api_client_for(org), project, {**body, "dataset_format": "alpaca"})
    public = _post(
        api_client_for(org),
        project,
        {**body, "dataset": "globex/theirs", "dataset_format": "alpaca"},
        key="ft-2",
    )

    assert response.status_code == 201, response.json()
    assert public.status_code == 201, public.json()


def test_another_orgs_project_is_404(api_client_for, org, other_project):
    response = _post(api_client_for(org), other_project, {"name": "ft", **CONFIG})
    assert response.status_code == 404


def _running_finetune(org, project):
    payload = payloads.job_payload(name="ft", project_id=project.public_id, config=CONFIG)
    job = services.job_create(organization=org, payload=payload, kind=Job.Kind.FINETUNE).job
    attempt = dispatch.allocate(job.pk)
    for step in (JobState.PROVISIONING, JobState.RUNNING):
        services.job_transition(job_id=job.pk, to=step)
    return Job.objects.get(pk=job.pk), attempt


def test_a_failed_self_grading_fails_the_job_grading_failed(org, project):
    job, attempt = _running_finetune(org, project)
    line = json.dumps(
        {
            "type": "grading",
            "eval_loss_before": 2.0,
            "eval_loss_after": float("nan"),
            "passed": False,
        }
    )
    ingestion.ingest(
        attempt=attempt,
        job=job,
        lines=[ingestion.IncomingLine(1, datetime.now(UTC), "user", "stdout", line)],
    )
    grading = JobEvent.objects.get(job=job, type="grading")
    assert grading.data == {
        "type": "grading",
        "eval_loss_before": 2.0,
        "eval_loss_after": "nan",
        "passed": False,
    }
    reports.runner_exited(attempt.pk, protocol.EXIT_GRADING_FAILED)
    supervision.finalize(job.pk)
    job.refresh_from_db()
    assert (job.state, job.reason) == (JobState.FAILED, "grading_failed")


def test_exit_code_3_of_a_container_job_is_just_an_exit_code(org):
    job = make_job(org)
    attempt = dispatch.allocate(job.pk)
    services.job_transition(job_id=job.pk, to=JobState.PROVISIONING)
    reports.runner_exited(attempt.pk, 3)
    supervision.finalize(job.pk)
    assert Job.objects.get(pk=job.pk).reason == "exit_code_3"


def _artifact(job, attempt, kind="checkpoint", step=10, content=b"tarball bytes"):
    path = default_storage.save(
        f"artifacts/{job.public_id}/{kind}-{step}.tar.gz", ContentFile(content)
    )
    return Artifact.objects.create(
        job=job,
        attempt=attempt.number,
        kind=kind,
        step=step,
        size_bytes=len(content),
        storage_path=path,
        sha256=hashlib.sha256(content).hexdigest(),
    )


def test_artifacts_are_listed_and_downloaded_through_the_api(
    api_client_for, org, project, other_org
):
    job, attempt = _running_finetune(org, project)
    checkpoint = _artifact(job, attempt)
    _artifact(job, attempt, kind="adapter", step=None, content=b"adapter bytes")
    api = api_client_for(org)
    body = api.get(f"/api/v1/compute/jobs/{job.public_id}/artifacts").json()
    assert [(a["kind"], a["step"]) for a in body["data"]] == [("checkpoint", 10), ("adapter", None)]
    assert body["data"][0]["sha256"] == checkpoint.sha256
    download = api.get(body["data"][0]["download_url"])
    assert download.status_code == 200
    assert b"".join(download.streaming_content) == b"tarball bytes"
    assert download["X-Trainyard-SHA256"] == checkpoint.sha256
    outsider = api_client_for(other_org)
    assert outsider.get(body["data"][0]["download_url"]).status_code == 404
    assert (
        api.get(f"/api/v1/compute/jobs/{job.public_id}/artifacts/art_999999/download").status_code
        == 404
    )


def test_the_job_page_lists_artifacts_and_grading(client_for, member, outsider, org, project):
    job, attempt = _running_finetune(org, project)
    checkpoint = _artifact(job, attempt, step=20)
    services.record_event(
        job=job,
        type="grading",
        data={"type": "grading", "eval_loss_before": 2.5, "eval_loss_after": 1.25, "passed": True},
    )
    client = client_for(member)
    body = client.get(f"/o/acme/jobs/{job.public_id}/").content.decode()
    assert "Self-grading passed" in body
    assert "2.5 before training" in body and "1.25 after" in body  # 4 significant digits
    link = f"/o/acme/jobs/{job.public_id}/artifacts/{checkpoint.id}/download/"
    assert link in body
    download = client.get(link)
    assert download.status_code == 200
    assert b"".join(download.streaming_content) == b"tarball bytes"
    assert client_for(outsider).get(link).status_code == 404
    assert Client().get(link).status_code == 302


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"max_step": 5}, "max_step"),
        ({"grading_threshold": 1000}, "grading_threshold"),
        ({"grading": {"max_eval_loss_ratio": 1.0}}, "grading"),
        ({"compute": {"accelerator": "cpu", "gpu_cnt": 1}}, "compute.gpu_cnt"),
        ({"limits": {"max_runtime_hour": 1}}, "limits.max_runtime_hour"),
    ],
)
def test_unknown_finetune_fields_are_400_naming_them(api_client_for, org, project, extra, param):
    response = _post(api_client_for(org), project, {"name": "ft", **CONFIG, **extra})
    assert response.status_code == 400, response.json()
    assert response.json()["error"] == {
        "type": "invalid_request",
        "message": "Unknown field.",
        "param": param,
    }
    assert not Job.objects.exists()
