"""STORAGE_BACKEND=s3: datasets and artifacts in an S3-compatible bucket (moto's server on
loopback, reached through boto3 and django-storages as in production). Uploads land in the
bucket with the announced digest and size, people and runners download the very same bytes,
nothing is written to the local disk, and a refused upload leaves the bucket empty."""

from __future__ import annotations

import hashlib
import json
import os
import time

import pytest
from botocore.response import StreamingBody
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from apps.core.stored_files import StoredFileMissing, open_stream
from apps.finetunes import services as project_services
from apps.finetunes.models import Dataset
from apps.jobs import services
from apps.jobs.execution import dispatch
from apps.jobs.execution.tokens import token_for
from apps.jobs.models import Artifact, Job
from apps.jobs.states import JobState
from runner.client import ControlClient
from runner.inputs import fetch_inputs
from tests.jobs.helpers import asgi_request, make_job
from trainer.data import read_samples

pytestmark = pytest.mark.django_db

# Above boto3's 8 MiB multipart threshold: the request body, which cannot seek, goes up in parts.
BIG = os.urandom(9 * 1024 * 1024 + 123)
ALPACA = [
    {"instruction": "Add the numbers", "input": "2 and 3", "output": "5"},
    {"instruction": "Say hi", "output": "Hello there"},
    {"instruction": "Name a color", "output": "Blue"},
]
DATASET = "\n".join(json.dumps(row) for row in ALPACA).encode() + b"\n"


def _runner_client(attempt) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {token_for(attempt.token_nonce)}")


def _allocated(org):
    job = make_job(org)
    attempt = dispatch.allocate(job.pk)
    services.job_transition(job_id=job.pk, to=JobState.PROVISIONING)
    return Job.objects.get(pk=job.pk), attempt


def _upload(job, attempt, body: bytes, query: str = "kind=checkpoint&step=5", sha=None):
    return _runner_client(attempt).post(
        f"/api/v1/runner/jobs/{job.public_id}/artifacts?{query}",
        data=body,
        content_type="application/gzip",
        headers={"X-Trainyard-SHA256": sha or hashlib.sha256(body).hexdigest()},
    )


def _content(response) -> bytes:
    try:
        return b"".join(response.streaming_content)
    finally:
        response.close()


def _nothing_local(settings) -> bool:
    root = settings.MEDIA_ROOT
    return not root.exists() or not any(path.is_file() for path in root.rglob("*"))


def test_a_runner_upload_lands_in_the_bucket_with_its_digest_and_size(org, s3_bucket, settings):
    job, attempt = _allocated(org)
    sha = hashlib.sha256(BIG).hexdigest()

    response = _upload(job, attempt, BIG)

    assert response.status_code == 201, response.content
    artifact = Artifact.objects.get()
    key = f"artifacts/{job.public_id}/attempt-1/checkpoint-5.tar.gz"
    assert response.json() == {"id": f"art_{artifact.pk}", "sha256": sha, "size_bytes": len(BIG)}
    assert (artifact.storage_path, artifact.sha256, artifact.size_bytes) == (key, sha, len(BIG))
    assert s3_bucket.keys() == [key]
    assert hashlib.sha256(s3_bucket.read(key)).hexdigest() == sha
    assert _nothing_local(settings)


def test_people_and_runners_download_the_same_bytes_from_the_bucket(
    org, member, client_for, api_client_for, s3_bucket
):
    job, attempt = _allocated(org)
    assert _upload(job, attempt, BIG, query="kind=adapter&step=").status_code == 201
    artifact = Artifact.objects.get()

    listing = api_client_for(org).get(f"/api/v1/compute/jobs/{job.public_id}/artifacts").json()
    from_api = api_client_for(org).get(listing["data"][0]["download_url"])
    page_link = f"/o/acme/jobs/{job.public_id}/artifacts/{artifact.pk}/download/"
    from_page = client_for(member).get(page_link)
    from_runner = _runner_client(attempt).get(
        f"/api/v1/runner/jobs/{job.public_id}/artifacts/{artifact.pk}/download"
    )

    for response in (from_api, from_page, from_runner):
        assert response.status_code == 200
        assert response["Content-Length"] == str(len(BIG))
        assert response["X-Trainyard-SHA256"] == artifact.sha256
        assert _content(response) == BIG
    assert from_page["Content-Disposition"] == (
        f'attachment; filename="{job.public_id}-attempt1-adapter-final.tar.gz"'
    )


def test_an_object_gone_from_the_bucket_is_a_404_not_a_crash(org, member, client_for, s3_bucket):
    job, attempt = _allocated(org)
    assert _upload(job, attempt, b"small tarball").status_code == 201
    artifact = Artifact.objects.get()
    s3_bucket.client.delete_object(Bucket=s3_bucket.name, Key=artifact.storage_path)

    page = client_for(member).get(f"/o/acme/jobs/{job.public_id}/artifacts/{artifact.pk}/download/")
    runner = _runner_client(attempt).get(
        f"/api/v1/runner/jobs/{job.public_id}/artifacts/{artifact.pk}/download"
    )

    assert (page.status_code, runner.status_code) == (404, 404)


def test_a_refused_upload_leaves_the_bucket_empty(org, s3_bucket, settings):
    job, attempt = _allocated(org)
    assert _upload(job, attempt, b"some bytes", sha="0" * 64).status_code == 400
    settings.ARTIFACT_MAX_BYTES = 8 * 1024 * 1024
    status, body = asgi_request(  # chunked: counted while it streams to the bucket
        "POST",
        f"/api/v1/runner/jobs/{job.public_id}/artifacts",
        query="kind=checkpoint&step=6",
        headers={
            "Authorization": f"Bearer {token_for(attempt.token_nonce)}",
            "X-Trainyard-SHA256": hashlib.sha256(BIG).hexdigest(),
        },
        chunks=[BIG[i : i + 1024 * 1024] for i in range(0, len(BIG), 1024 * 1024)],
    )

    assert status == 413
    assert json.loads(body)["error"]["type"] == "payload_too_large"
    assert not Artifact.objects.exists()
    assert s3_bucket.keys() == []
    assert _nothing_local(settings)


def test_a_dataset_upload_goes_to_the_bucket_and_previews_from_it(
    member, client_for, project, s3_bucket, settings
):
    client = client_for(member)
    upload = SimpleUploadedFile("toy.jsonl", DATASET)
    url = "/o/acme/projects/vision/datasets/"

    response = client.post(url, {"name": "Toy", "file": upload, "dataset_format": "alpaca"})

    assert response.status_code == 302
    dataset = Dataset.objects.get()
    key = f"datasets/{project.public_id}/toy.jsonl"
    assert s3_bucket.keys() == [key]
    assert s3_bucket.read(key) == DATASET
    assert dataset.sha256 == hashlib.sha256(DATASET).hexdigest()
    detail = client.get(response["Location"]).content.decode()
    assert "### Instruction:\nAdd the numbers" in detail and "Hello there" in detail
    assert f'<code id="dataset-id">{dataset.public_id}</code>' in detail
    listing = client.get(url)
    assert listing.status_code == 200 and dataset.public_id in listing.content.decode()
    assert _nothing_local(settings)


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_the_runner_fetches_a_finetunes_uploaded_dataset_from_the_bucket(
    org, project, api_client_for, s3_bucket, live_server, tmp_path
):
    dataset = project_services.dataset_upload(
        project=project,
        name="Toy",
        upload=SimpleUploadedFile("toy.jsonl", DATASET),
        dataset_format="alpaca",
    )
    created = api_client_for(org).post(
        f"/api/v1/projects/{project.public_id}/finetunes",
        {"name": "ft", "model": "/models/tiny", "dataset": dataset.public_id},
        format="json",
        HTTP_IDEMPOTENCY_KEY="ft-s3",
    )
    assert created.status_code == 201, created.json()
    job = Job.objects.get(public_id=created.json()["id"])
    attempt = dispatch.allocate(job.pk)
    # The real runner's client, over HTTP, with the attempt's token.
    client = ControlClient(live_server.url, job.public_id, token_for(attempt.token_nonce))

    spec = client.get_spec()
    work = tmp_path / "work"
    fetched = fetch_inputs(
        client,
        spec["inputs"],
        work,
        deadline=time.monotonic() + 30,
        should_stop=lambda: False,
        sleep=time.sleep,
    )

    config = json.loads(spec["env"]["FINETUNE_CONFIG"])
    path = f"inputs/{dataset.public_id}.jsonl"
    assert (config["dataset"], config["dataset_format"]) == (path, "alpaca")
    assert fetched == [work / path]
    assert (work / path).read_bytes() == DATASET
    # What the trainer reads from its working directory.
    samples = read_samples(str(work / config["dataset"]), config["dataset_format"])
    assert [number for number, _ in samples] == [1, 2, 3]


def test_a_stored_object_is_streamed_not_fetched_whole_first(s3_bucket):
    """The first thing a fresh process does may be a download: it must still stream from
    the GET's body (S3File would copy the whole object to a temporary file first)."""
    s3_bucket.client.put_object(Bucket=s3_bucket.name, Key="artifacts/x.tar.gz", Body=BIG)

    stream = open_stream("artifacts/x.tar.gz")
    try:
        assert isinstance(stream, StreamingBody)
        assert stream.read(10) == BIG[:10]
    finally:
        stream.close()
    with pytest.raises(StoredFileMissing):
        open_stream("artifacts/missing.tar.gz")
