"""The job's code archive on the runner API: the spec names it (download URL, digest, size)
with the inline files; only a runner of a job that names the archive may download it; an
archive gone before the spec is served fails the job `workdir_invalid`, as does the
runner's exit 65 before any workload started. Called as the runner calls it (Django test
client, a real token, the real database)."""

from __future__ import annotations

import hashlib
import io

import pytest
from django.test import Client

from apps.jobs import services
from apps.jobs.execution import dispatch, reports, supervision
from apps.jobs.execution.tokens import token_for
from apps.jobs.models import Job, LogLine
from apps.jobs.states import JobState
from apps.workdirs import store
from apps.workdirs.models import Workdir
from runner import protocol
from tests.jobs.helpers import make_job
from tests.runner.test_archive import make_tar

pytestmark = pytest.mark.django_db

FILES = {"conf/run.json": '{"steps": 3}'}


@pytest.fixture(autouse=True)
def media(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path / "media"


def _workdir(org, tmp_path, name="code.tgz") -> tuple[Workdir, bytes]:
    body = make_tar(tmp_path / name, [("file", "train.py", b"print(1)\n")]).read_bytes()
    return store.workdir_create(organization=org, source=io.BytesIO(body)), body


def _provisioning(org, **container) -> tuple[Job, Client, object]:
    base = {"image": "img", "command": ["python", "train.py"], **container}
    job = make_job(org, container=base)
    attempt = dispatch.allocate(job.pk)
    services.job_transition(job_id=job.pk, to=JobState.PROVISIONING)
    client = Client(HTTP_AUTHORIZATION=f"Bearer {token_for(attempt.token_nonce)}")
    return job, client, attempt


def _download_url(job, workdir_id) -> str:
    return f"/api/v1/runner/jobs/{job.public_id}/workdirs/{workdir_id}/download"


def test_the_spec_names_the_archive_and_the_files(org, tmp_path):
    workdir, body = _workdir(org, tmp_path)
    job, client, _ = _provisioning(org, workdir=workdir.public_id, files=FILES)

    spec = client.get(f"/api/v1/runner/jobs/{job.public_id}/spec").json()

    assert spec["workdir"] == {
        "id": workdir.public_id,
        "format": "tar.gz",
        "download_url": _download_url(job, workdir.public_id),
        "sha256": hashlib.sha256(body).hexdigest(),
        "size_bytes": len(body),
    }
    assert spec["files"] == FILES
    assert spec["protocol_version"] == 1


def test_a_job_without_code_has_no_workdir_in_its_spec(org):
    job, client, _ = _provisioning(org)
    spec = client.get(f"/api/v1/runner/jobs/{job.public_id}/spec").json()
    assert (spec["workdir"], spec["files"]) == (None, {})


def test_the_runner_downloads_the_archive_its_job_names_and_no_other(org, other_org, tmp_path):
    workdir, body = _workdir(org, tmp_path)
    other, _ = _workdir(org, tmp_path, "other.tgz")
    theirs, _ = _workdir(other_org, tmp_path, "theirs.tgz")
    job, client, _ = _provisioning(org, workdir=workdir.public_id)
    plain_job, plain_client, _ = _provisioning(org)

    answer = client.get(_download_url(job, workdir.public_id))

    assert answer.status_code == 200
    assert b"".join(answer.streaming_content) == body
    assert answer[protocol.SHA256_HEADER] == hashlib.sha256(body).hexdigest()
    assert answer["Content-Length"] == str(len(body))
    for workdir_id in (other.public_id, theirs.public_id, "wd_nope"):
        assert client.get(_download_url(job, workdir_id)).status_code == 404
    # A token of another job, even of the same organization, opens nothing of this job.
    assert plain_client.get(_download_url(job, workdir.public_id)).status_code == 404
    assert plain_client.get(_download_url(plain_job, workdir.public_id)).status_code == 404
    assert Client().get(_download_url(job, workdir.public_id)).status_code == 401


def test_an_archive_gone_before_the_spec_fails_the_job_workdir_invalid(org, tmp_path):
    workdir, _ = _workdir(org, tmp_path)
    job, client, _ = _provisioning(org, workdir=workdir.public_id)
    workdir.delete()

    answer = client.get(f"/api/v1/runner/jobs/{job.public_id}/spec")

    assert answer.status_code == 409  # the runner exits 0 without starting anything
    job.refresh_from_db()
    assert (job.state, job.reason) == (JobState.FAILED, "workdir_invalid")
    system = LogLine.objects.filter(job=job, source="system").values_list("message", flat=True)
    assert any(workdir.public_id in line and "is gone" in line for line in system)


def test_the_runners_exit_65_before_the_workload_started_is_workdir_invalid(org, tmp_path):
    workdir, _ = _workdir(org, tmp_path)
    job, _, attempt = _provisioning(org, workdir=workdir.public_id)
    reports.runner_exited(attempt.pk, protocol.EXIT_WORKDIR_INVALID)
    supervision.finalize(job.pk)
    job.refresh_from_db()
    assert (job.state, job.reason, job.exit_code) == (JobState.FAILED, "workdir_invalid", 65)


@pytest.mark.parametrize("code", [True, False])
def test_a_workloads_own_exit_65_is_just_an_exit_code(org, tmp_path, code):
    container = {"files": FILES} if code else {}
    job, _, attempt = _provisioning(org, **container)
    if code:
        reports.runner_started(attempt.pk)
    reports.runner_exited(attempt.pk, 65)
    supervision.finalize(job.pk)
    assert Job.objects.get(pk=job.pk).reason == "exit_code_65"
