"""Artifacts on the control plane: `artifact_store` (storage layout, digest check, idempotency,
events), the newest checkpoint, and the runner's upload and download endpoints called as the
runner calls them (Django test client, a real runner token, the real database)."""

from __future__ import annotations

import hashlib
import io
import json
import os

import pytest
from django.core.files.storage import default_storage
from django.test import Client

from apps.jobs import services
from apps.jobs.artifacts import store
from apps.jobs.execution import attempts, dispatch
from apps.jobs.execution.tokens import token_for
from apps.jobs.models import Artifact, Attempt, Job, JobEvent, LogLine
from apps.jobs.states import JobState
from tests.jobs.helpers import asgi_request, make_job

pytestmark = pytest.mark.django_db

BODY = b"\x1f\x8b pretend this is a tar.gz " * 100
SHA = hashlib.sha256(BODY).hexdigest()


@pytest.fixture(autouse=True)
def media(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path / "media"
    return settings.MEDIA_ROOT


def _allocated(org) -> tuple[Job, Attempt]:
    job = make_job(org)
    attempt = dispatch.allocate(job.pk)
    services.job_transition(job_id=job.pk, to=JobState.PROVISIONING)
    return Job.objects.get(pk=job.pk), attempt


def _second_attempt(job: Job, first: Attempt) -> Attempt:
    services.job_transition(job_id=job.pk, to=JobState.PREEMPTED)
    attempts.end_attempt(Attempt.objects.get(pk=first.pk), reason="reclaimed")
    services.job_transition(job_id=job.pk, to=JobState.REQUESTED)
    return dispatch.allocate(job.pk)


def _stored_files(media) -> list[str]:
    return sorted(
        os.path.relpath(os.path.join(folder, name), media)
        for folder, _, names in os.walk(media)
        for name in names
    )


def _store(attempt, kind="checkpoint", step=5, body=BODY, sha=None) -> Artifact:
    return store.artifact_store(
        attempt=attempt,
        kind=kind,
        step=step,
        fileobj=io.BytesIO(body),
        sha256=sha or hashlib.sha256(body).hexdigest(),
    )


# -- artifact_store ----------------------------------------------------------------------


def test_it_stores_a_checkpoint_under_the_job_and_attempt_and_records_the_event(org, media):
    job, attempt = _allocated(org)

    artifact = _store(attempt)

    path = f"artifacts/{job.public_id}/attempt-1/checkpoint-5.tar.gz"
    assert (artifact.job_id, artifact.attempt, artifact.kind, artifact.step) == (
        job.pk,
        1,
        "checkpoint",
        5,
    )
    assert (artifact.size_bytes, artifact.sha256, artifact.storage_path) == (len(BODY), SHA, path)
    assert _stored_files(media) == [path]
    with default_storage.open(path, "rb") as stored:
        assert stored.read() == BODY
    event = JobEvent.objects.get(job=job, type="checkpoint_saved")
    assert event.attempt == 1
    assert event.data == {
        "artifact_id": f"art_{artifact.pk}",
        "kind": "checkpoint",
        "step": 5,
        "size_bytes": len(BODY),
        "sha256": SHA,
    }
    assert event.message == f"Checkpoint at step 5 saved ({len(BODY)} bytes)."


def test_the_final_adapter_has_no_step_and_its_own_event(org, media):
    job, attempt = _allocated(org)

    artifact = _store(attempt, kind="adapter", step=None)

    assert artifact.storage_path == f"artifacts/{job.public_id}/attempt-1/adapter-final.tar.gz"
    event = JobEvent.objects.get(job=job, type="adapter_uploaded")
    assert event.data["step"] is None
    assert event.message == f"Final adapter uploaded ({len(BODY)} bytes)."


def test_a_sha256_mismatch_stores_nothing(org, media):
    job, attempt = _allocated(org)
    events_before = JobEvent.objects.filter(job=job).count()

    with pytest.raises(store.Sha256Mismatch):
        _store(attempt, sha="0" * 64)

    assert not Artifact.objects.exists()
    assert _stored_files(media) == []
    assert JobEvent.objects.filter(job=job).count() == events_before


def test_a_repeat_returns_the_stored_artifact_without_reading_or_storing(org, media):
    job, attempt = _allocated(org)
    first = _store(attempt)
    repeat_body = io.BytesIO(b"other bytes")

    again = store.artifact_store(
        attempt=attempt, kind="checkpoint", step=5, fileobj=repeat_body, sha256=SHA
    )

    assert again.pk == first.pk
    assert repeat_body.tell() == 0
    assert Artifact.objects.count() == 1
    assert len(_stored_files(media)) == 1
    assert JobEvent.objects.filter(job=job, type="checkpoint_saved").count() == 1


def test_a_duplicate_that_loses_the_race_deletes_its_file_and_returns_the_winner(
    org, media, monkeypatch
):
    job, attempt = _allocated(org)
    winner = _store(attempt)
    real_find, looks = store.artifact_find, []

    def find(**key):
        looks.append(key)  # the loser's first look came before the winner's row existed
        return None if len(looks) == 1 else real_find(**key)

    monkeypatch.setattr(store, "artifact_find", find)

    loser = _store(attempt)

    assert loser.pk == winner.pk
    assert _stored_files(media) == [winner.storage_path]
    assert JobEvent.objects.filter(job=job, type="checkpoint_saved").count() == 1


@pytest.mark.parametrize(
    ("kind", "step", "sha", "param"),
    [
        ("model", 5, SHA, "kind"),
        ("checkpoint", None, SHA, "step"),
        ("checkpoint", -1, SHA, "step"),
        ("checkpoint", 5, "abc", "X-Trainyard-SHA256"),
        ("checkpoint", 5, SHA.upper(), "X-Trainyard-SHA256"),
    ],
)
def test_a_bad_key_is_refused_before_anything_is_stored(org, media, kind, step, sha, param):
    _, attempt = _allocated(org)
    with pytest.raises(store.InvalidRequest) as caught:
        _store(attempt, kind=kind, step=step, sha=sha)
    assert caught.value.param == param
    assert _stored_files(media) == []


def test_the_newest_checkpoint_is_the_highest_step_of_any_attempt_then_the_latest(org):
    job, first = _allocated(org)
    assert store.newest_checkpoint(job) is None
    _store(first, step=10)
    at_20 = _store(first, step=20)
    _store(first, kind="adapter", step=None)
    second = _second_attempt(job, first)
    _store(second, step=15)
    assert store.newest_checkpoint(job).pk == at_20.pk
    again_20 = _store(second, step=20)
    assert store.newest_checkpoint(job).pk == again_20.pk


# -- the runner's endpoints --------------------------------------------------------------


class Runner:
    def __init__(self, job: Job, attempt: Attempt) -> None:
        self.job, self.attempt = job, attempt
        self.client = Client(HTTP_AUTHORIZATION=f"Bearer {token_for(attempt.token_nonce)}")

    def upload(self, query: str, body: bytes = BODY, sha: str | None = None, job_id=None):
        return self.client.post(
            f"/api/v1/runner/jobs/{job_id or self.job.public_id}/artifacts?{query}",
            data=body,
            content_type="application/gzip",
            headers={"X-Trainyard-SHA256": sha or hashlib.sha256(body).hexdigest()},
        )

    def download(self, artifact_id: int, job_id=None):
        return self.client.get(
            f"/api/v1/runner/jobs/{job_id or self.job.public_id}/artifacts/{artifact_id}/download"
        )


def _runner(org) -> Runner:
    return Runner(*_allocated(org))


def _content(response) -> bytes:
    try:
        return b"".join(response.streaming_content)
    finally:
        response.close()


def test_an_upload_is_201_then_200_on_a_repeat(org, media):
    runner = _runner(org)

    created = runner.upload("kind=checkpoint&step=5")
    repeated = runner.upload("kind=checkpoint&step=5")

    artifact = Artifact.objects.get()
    assert created.status_code == 201
    assert created.json() == {"id": f"art_{artifact.pk}", "sha256": SHA, "size_bytes": len(BODY)}
    assert (repeated.status_code, repeated.json()) == (200, created.json())
    assert artifact.storage_path == (
        f"artifacts/{runner.job.public_id}/attempt-1/checkpoint-5.tar.gz"
    )


def test_an_adapter_upload_with_an_empty_step_is_the_final_adapter(org, media):
    runner = _runner(org)
    response = runner.upload("kind=adapter&step=")
    assert response.status_code == 201
    assert Artifact.objects.get().step is None


def test_a_body_bigger_than_djangos_in_memory_limit_is_streamed(org, media, settings):
    runner = _runner(org)
    body = os.urandom(settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1024 * 1024)

    response = runner.upload("kind=checkpoint&step=1", body=body)

    assert response.status_code == 201, response.content
    with default_storage.open(Artifact.objects.get().storage_path, "rb") as stored:
        assert hashlib.sha256(stored.read()).hexdigest() == hashlib.sha256(body).hexdigest()


@pytest.mark.parametrize(
    ("query", "sha", "error", "param"),
    [
        ("kind=checkpoint&step=5", "f" * 64, "sha256_mismatch", "X-Trainyard-SHA256"),
        ("kind=checkpoint", None, "invalid_request", "step"),
        ("kind=checkpoint&step=five", None, "invalid_request", "step"),
        ("kind=weights&step=5", None, "invalid_request", "kind"),
        ("kind=checkpoint&step=5", "not-hex", "invalid_request", "X-Trainyard-SHA256"),
    ],
)
def test_a_bad_upload_is_400_and_stores_nothing(org, media, query, sha, error, param):
    runner = _runner(org)
    response = runner.upload(query, sha=sha)
    assert response.status_code == 400
    assert (response.json()["error"]["type"], response.json()["error"]["param"]) == (error, param)
    assert not Artifact.objects.exists()
    assert _stored_files(media) == []


@pytest.mark.usefixtures("shared_host")
def test_uploads_need_the_jobs_own_token(org, other_org, media):
    mine, theirs = _runner(org), _runner(other_org)
    assert mine.upload("kind=checkpoint&step=5", job_id=theirs.job.public_id).status_code == 404
    anonymous = Client().post(
        f"/api/v1/runner/jobs/{mine.job.public_id}/artifacts?kind=checkpoint&step=5",
        data=BODY,
        content_type="application/gzip",
    )
    assert anonymous.status_code == 401
    assert not Artifact.objects.exists()


def test_a_download_streams_the_stored_file_with_its_digest(org, media):
    runner = _runner(org)
    artifact = _store(runner.attempt)

    response = runner.download(artifact.pk)

    assert response.status_code == 200
    assert response["Content-Type"] == "application/gzip"
    assert response["X-Trainyard-SHA256"] == SHA
    assert _content(response) == BODY


@pytest.mark.usefixtures("shared_host")
def test_another_jobs_artifact_is_404(org, other_org, media):
    mine, theirs = _runner(org), _runner(other_org)
    their_artifact = _store(theirs.attempt)

    assert mine.download(their_artifact.pk).status_code == 404
    assert mine.download(their_artifact.pk, job_id=theirs.job.public_id).status_code == 404
    assert mine.download(their_artifact.pk + 1000).status_code == 404


def test_the_spec_offers_the_newest_checkpoint_to_resume_from(org, media):
    job, first = _allocated(org)
    spec_path = f"/api/v1/runner/jobs/{job.public_id}/spec"
    assert Runner(job, first).client.get(spec_path).json()["resume_from"] is None
    _store(first, step=3, body=b"three")
    newest = _store(first, step=8, body=b"eight")
    second = Runner(job, _second_attempt(job, first))

    spec = second.client.get(spec_path).json()

    download_url = f"/api/v1/runner/jobs/{job.public_id}/artifacts/{newest.pk}/download"
    assert spec["resume_from"] == {
        "artifact_id": f"art_{newest.pk}",
        "step": 8,
        "sha256": hashlib.sha256(b"eight").hexdigest(),
        "download_url": download_url,
    }
    assert spec["env"]["TRAINYARD_RESUME_FROM"] == ""
    assert _content(second.client.get(download_url)) == b"eight"


# -- the size limit (ARTIFACT_MAX_BYTES) ---------------------------------------------------


def _refusals(job: Job) -> tuple[list[JobEvent], list[str]]:
    events = list(JobEvent.objects.filter(job=job, type="artifact_refused"))
    lines = list(
        LogLine.objects.filter(job=job, source=LogLine.Source.SYSTEM).values_list(
            "message", flat=True
        )
    )
    return events, [line for line in lines if "refused" in line]


def test_an_upload_announcing_more_than_the_limit_is_413_and_recorded(org, media, settings):
    settings.ARTIFACT_MAX_BYTES = len(BODY) - 1
    runner = _runner(org)

    response = runner.upload("kind=checkpoint&step=5")

    assert response.status_code == 413
    assert response.json() == {
        "error": {
            "type": "payload_too_large",
            "message": "The checkpoint at step 5 was refused: 2.7 KiB (2,800 bytes) is over "
            "the ARTIFACT_MAX_BYTES limit of 2.7 KiB (2,799 bytes).",
            "param": "Content-Length",
        }
    }
    assert not Artifact.objects.exists()
    assert _stored_files(media) == []
    events, lines = _refusals(runner.job)
    assert [(e.type, e.attempt, e.data) for e in events] == [
        (
            "artifact_refused",
            1,
            {
                "kind": "checkpoint",
                "step": 5,
                "size_bytes": len(BODY),
                "limit_bytes": len(BODY) - 1,
            },
        )
    ]
    assert lines == [events[0].message]
    assert not JobEvent.objects.filter(job=runner.job, type="checkpoint_saved").exists()


def test_an_upload_of_exactly_the_limit_is_stored(org, media, settings):
    settings.ARTIFACT_MAX_BYTES = len(BODY)
    runner = _runner(org)
    assert runner.upload("kind=adapter&step=").status_code == 201
    assert Artifact.objects.get().size_bytes == len(BODY)
    assert _refusals(runner.job) == ([], [])


def _chunked_upload(runner: Runner, chunks: list[bytes], sha: str):
    return asgi_request(
        "POST",
        f"/api/v1/runner/jobs/{runner.job.public_id}/artifacts",
        query="kind=checkpoint&step=9",
        headers={
            "Authorization": f"Bearer {token_for(runner.attempt.token_nonce)}",
            "Content-Type": "application/gzip",
            "X-Trainyard-SHA256": sha,
        },
        chunks=chunks,
    )


def test_a_chunked_upload_is_counted_and_cut_off_past_the_limit(org, media, settings):
    settings.ARTIFACT_MAX_BYTES = 10_000
    runner = _runner(org)
    chunks = [os.urandom(4096) for _ in range(4)]  # 16 KiB, announced nowhere
    sha = hashlib.sha256(b"".join(chunks)).hexdigest()

    status, body = _chunked_upload(runner, chunks, sha)

    assert status == 413
    error = json.loads(body)["error"]
    assert error["type"] == "payload_too_large"
    assert error["message"] == (
        "The checkpoint at step 9 was refused: it is over the ARTIFACT_MAX_BYTES limit of "
        "9.8 KiB (10,000 bytes)."
    )
    assert not Artifact.objects.exists()
    assert _stored_files(media) == []  # the part written before the cut is deleted
    events, lines = _refusals(runner.job)
    assert [e.data["size_bytes"] for e in events] == [None]
    assert lines == [events[0].message]


def test_a_chunked_upload_under_the_limit_is_stored(org, media, settings):
    settings.ARTIFACT_MAX_BYTES = 20_000
    runner = _runner(org)
    chunks = [os.urandom(4096) for _ in range(4)]
    whole = b"".join(chunks)

    status, body = _chunked_upload(runner, chunks, hashlib.sha256(whole).hexdigest())

    assert status == 201, body
    artifact = Artifact.objects.get()
    assert json.loads(body)["size_bytes"] == artifact.size_bytes == len(whole)
    with default_storage.open(artifact.storage_path, "rb") as stored:
        assert stored.read() == whole
