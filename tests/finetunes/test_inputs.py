"""A fine-tune on an uploaded dataset, as its runner sees it: the spec lists the dataset as an
input and hands the trainer its path in the working directory; the runner API serves that
dataset, and only that one, to the job's own token."""

from __future__ import annotations

import hashlib
import json

import pytest
from django.test import Client

from apps.finetunes import payloads
from apps.jobs import services
from apps.jobs.execution import dispatch
from apps.jobs.execution.tokens import token_for
from apps.jobs.models import Job
from tests.factories import uploaded_dataset
from tests.jobs.helpers import make_job
from trainer.data import read_samples
from trainer.formats import DataError

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def media(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path / "media"


def _finetune(org, project, dataset: str):
    config = {"model": "acme/tiny-model", "dataset": dataset, "dataset_format": "alpaca"}
    payload = payloads.job_payload(name="ft", project_id=project.public_id, config=config)
    job = services.job_create(organization=org, payload=payload, kind=Job.Kind.FINETUNE).job
    attempt = dispatch.allocate(job.pk)
    return Job.objects.get(pk=job.pk), attempt


def _runner(attempt) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {token_for(attempt.token_nonce)}")


def _spec(job, attempt) -> dict:
    response = _runner(attempt).get(f"/api/v1/runner/jobs/{job.public_id}/spec")
    assert response.status_code == 200
    return response.json()


def _content(response) -> bytes:
    try:
        return b"".join(response.streaming_content)
    finally:
        response.close()


def test_the_spec_lists_the_uploaded_dataset_and_points_the_trainer_at_it(org, project):
    toy = uploaded_dataset(project, name="Toy")
    job, attempt = _finetune(org, project, toy.public_id)

    spec = _spec(job, attempt)

    path = f"inputs/{toy.public_id}.jsonl"
    download_url = f"/api/v1/runner/jobs/{job.public_id}/datasets/{toy.public_id}/download"
    assert spec["inputs"] == [
        {
            "path": path,
            "download_url": download_url,
            "sha256": toy.sha256,
            "size_bytes": toy.size_bytes,
        }
    ]
    config = json.loads(spec["env"][payloads.CONFIG_ENV])
    assert config == {
        "model": "acme/tiny-model",
        "dataset": path,
        "dataset_format": "alpaca",
    }
    # The job itself keeps naming the dataset by id.
    assert payloads.config_of(Job.objects.get(pk=job.pk))["dataset"] == toy.public_id

    download = _runner(attempt).get(download_url)
    assert download.status_code == 200
    body = _content(download)
    assert hashlib.sha256(body).hexdigest() == toy.sha256 == download["X-Trainyard-SHA256"]
    assert download["Content-Length"] == str(toy.size_bytes) == str(len(body))


@pytest.mark.usefixtures("shared_host")
def test_a_token_fetches_only_the_dataset_its_job_names(org, other_org, project, other_project):
    toy = uploaded_dataset(project, name="Toy")
    other = uploaded_dataset(project, name="Other")
    job, attempt = _finetune(org, project, toy.public_id)
    their_job, their_attempt = _finetune(
        other_org, other_project, uploaded_dataset(other_project).public_id
    )
    base = f"/api/v1/runner/jobs/{job.public_id}/datasets"

    assert _runner(attempt).get(f"{base}/{other.public_id}/download").status_code == 404
    assert _runner(their_attempt).get(f"{base}/{toy.public_id}/download").status_code == 404
    theirs = f"/api/v1/runner/jobs/{their_job.public_id}/datasets/{toy.public_id}/download"
    assert _runner(their_attempt).get(theirs).status_code == 404
    assert Client().get(f"{base}/{toy.public_id}/download").status_code == 401


@pytest.mark.parametrize("kind", ["container", "hub dataset"])
def test_jobs_without_an_uploaded_dataset_get_no_inputs(org, project, kind):
    if kind == "container":
        job = make_job(org)
        attempt = dispatch.allocate(job.pk)
    else:
        job, attempt = _finetune(org, project, "tatsu-lab/alpaca")

    spec = _spec(job, attempt)

    assert spec["inputs"] == []
    assert spec["env"].get(payloads.CONFIG_ENV) == job.spec["container"]["env"].get(
        payloads.CONFIG_ENV
    )


def test_a_dataset_deleted_since_is_not_offered_and_the_trainer_says_which_file(
    org, project, tmp_path
):
    toy = uploaded_dataset(project, name="Toy")
    job, attempt = _finetune(org, project, toy.public_id)
    toy.delete()

    spec = _spec(job, attempt)

    assert spec["inputs"] == []
    config = json.loads(spec["env"][payloads.CONFIG_ENV])
    assert config["dataset"] == f"inputs/{toy.public_id}.jsonl"
    with pytest.raises(DataError) as failed:  # what the trainer then reports, in tmp_path
        read_samples(str(tmp_path / config["dataset"]), "alpaca")
    assert f"inputs/{toy.public_id}.jsonl does not exist" in str(failed.value)
