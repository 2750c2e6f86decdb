"""Storage bounds (T3-7): per-organization quotas over workdirs, datasets and artifacts (413
`quota_exceeded` naming the quota, shown on the Settings page); list, get and delete of code
archives; archives no job has named for WORKDIR_RETENTION_DAYS expire by beat's task."""

from __future__ import annotations

import hashlib
import io
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.utils import timezone

from apps.accounts.models import Role
from apps.finetunes.models import Dataset
from apps.jobs.artifacts import store as artifact_store
from apps.jobs.execution import dispatch
from apps.jobs.models import Artifact, Job, JobEvent
from apps.jobs.states import JobState as S
from apps.workdirs import tasks
from apps.workdirs.models import Workdir
from config.celery import app as celery_app
from tests.factories import ProjectFactory, uploaded_dataset
from tests.jobs.helpers import make_job
from tests.runner.test_archive import make_tar

pytestmark = pytest.mark.django_db

URL = "/api/v1/compute/workdirs"


@pytest.fixture(autouse=True)
def media(settings, tmp_path) -> Path:
    settings.MEDIA_ROOT = tmp_path / "media"
    return settings.MEDIA_ROOT


def _stored_files(media: Path) -> list[Path]:
    return sorted(p for p in media.rglob("*") if p.is_file()) if media.exists() else []


def _body(tmp_path, size: int = 10) -> bytes:
    path = make_tar(tmp_path / f"a-{uuid.uuid4().hex}.tgz", [("file", "a.bin", b"x" * size)])
    return path.read_bytes()


def _upload(client, tmp_path, size: int = 10):
    return client.generic("POST", URL, _body(tmp_path, size), content_type="application/gzip")


def _container(workdir_id: str) -> dict:
    return {"image": "python:3.11-slim", "command": ["python", "-c", "1"], "workdir": workdir_id}


# -- list, get, delete ---------------------------------------------------------------------


def test_the_list_is_the_organizations_own_newest_first_and_paged(
    api_client_for, org, other_org, tmp_path
):
    client = api_client_for(org)
    ids = [_upload(client, tmp_path).json()["id"] for _ in range(3)]
    _upload(api_client_for(other_org), tmp_path)

    first = client.get(URL, {"limit": 2})
    assert first.status_code == 200, first.content
    assert [row["id"] for row in first.json()["data"]] == ids[::-1][:2]
    assert first.json()["total"] == 3
    second = client.get(URL, {"limit": 2, "cursor": first.json()["next_cursor"]})
    assert [row["id"] for row in second.json()["data"]] == [ids[0]]
    assert second.json()["next_cursor"] is None
    assert set(second.json()["data"][0]) == {"id", "size_bytes", "sha256", "format", "created_at"}
    # Viewers read too.
    viewer = api_client_for(org, role=Role.VIEWER)
    assert viewer.get(URL).json()["total"] == 3


def test_delete_removes_the_row_and_the_file_and_another_orgs_is_not_found(
    api_client_for, org, other_org, tmp_path, media, django_capture_on_commit_callbacks
):
    mine = api_client_for(org)
    theirs = _upload(api_client_for(other_org), tmp_path).json()["id"]
    own = _upload(mine, tmp_path).json()["id"]
    assert len(_stored_files(media)) == 2

    for method in (mine.get, mine.delete):
        response = method(f"{URL}/{theirs}")
        assert response.status_code == 404
        assert response.json()["error"]["type"] == "not_found"
    assert Workdir.objects.filter(public_id=theirs).exists()
    assert api_client_for(org, role=Role.VIEWER).delete(f"{URL}/{own}").status_code == 403

    assert mine.get(f"{URL}/{own}").json()["id"] == own
    with django_capture_on_commit_callbacks(execute=True):
        response = mine.delete(f"{URL}/{own}")

    assert response.status_code == 204, response.content
    assert not Workdir.objects.filter(public_id=own).exists()
    assert [p.name for p in _stored_files(media)] == [f"{theirs}.tar.gz"]
    assert mine.delete(f"{URL}/{own}").status_code == 404


def test_an_archive_named_by_a_job_that_has_not_ended_cannot_be_deleted(
    api_client_for, org, tmp_path
):
    client = api_client_for(org)
    workdir_id = _upload(client, tmp_path).json()["id"]
    job = make_job(org, state=S.RUNNING, container=_container(workdir_id))

    response = client.delete(f"{URL}/{workdir_id}")

    assert response.status_code == 409, response.content
    error = response.json()["error"]
    assert error["type"] == "workdir_in_use"
    assert job.public_id in error["message"] and "running" in error["message"]
    assert Workdir.objects.filter(public_id=workdir_id).exists()

    Job.objects.filter(pk=job.pk).update(state=S.SUCCEEDED)
    assert client.delete(f"{URL}/{workdir_id}").status_code == 204


# -- quotas --------------------------------------------------------------------------------


def test_a_workdir_over_the_quota_is_a_413_naming_the_quota(
    api_client_for, org, tmp_path, settings, media
):
    client = api_client_for(org)
    first = _upload(client, tmp_path)
    settings.ORG_STORAGE_QUOTA_BYTES = first.json()["size_bytes"] + 50

    response = _upload(client, tmp_path)

    assert response.status_code == 413, response.content
    error = response.json()["error"]
    assert (error["type"], error["param"]) == ("quota_exceeded", "file")
    assert "ORG_STORAGE_QUOTA_BYTES" in error["message"]
    assert f"quota of {settings.ORG_STORAGE_QUOTA_BYTES} bytes" in error["message"]
    assert Workdir.objects.count() == 1 and len(_stored_files(media)) == 1

    # The organization's own quota wins over the setting, and 0 means none.
    org.storage_quota_bytes = 0
    org.save()
    assert _upload(client, tmp_path).status_code == 201
    org.storage_quota_bytes = 1
    org.save()
    refused = _upload(client, tmp_path).json()["error"]
    assert refused["type"] == "quota_exceeded" and "storage_quota_bytes" in refused["message"]


def test_datasets_count_against_the_quota_and_are_refused_past_it(
    api_client_for, client_for, member, org, settings, media
):
    project = ProjectFactory(organization=org)
    stored = uploaded_dataset(project, name="First")
    settings.ORG_STORAGE_QUOTA_BYTES = stored.size_bytes + 10
    content = b'{"instruction": "Say hi", "output": "Hello there"}\n'

    response = api_client_for(org).post(
        f"/api/v1/projects/{project.public_id}/datasets",
        {"file": io.BytesIO(content), "format": "alpaca", "name": "Second"},
        format="multipart",
    )

    assert response.status_code == 413, response.content
    assert response.json()["error"]["type"] == "quota_exceeded"
    upload = io.BytesIO(content)
    upload.name = "second.jsonl"
    page = client_for(member).post(
        f"/o/{org.slug}/projects/{project.slug}/datasets/",
        {"name": "Second", "dataset_format": "alpaca", "file": upload},
    )
    assert page.status_code == 413
    assert b"storage quota" in page.content
    assert list(Dataset.objects.values_list("name", flat=True)) == ["First"]


def test_an_artifact_past_the_quota_is_refused_and_the_job_says_why(org, settings, media):
    job = make_job(org)
    attempt = dispatch.allocate(job.pk)
    settings.ORG_STORAGE_QUOTA_BYTES = 1000
    body = b"x" * 1001

    with pytest.raises(artifact_store.storage.QuotaExceeded) as refused:
        artifact_store.artifact_store(
            attempt=attempt,
            kind="checkpoint",
            step=1,
            fileobj=io.BytesIO(body),
            sha256=hashlib.sha256(body).hexdigest(),
        )

    assert refused.value.status_code == 413
    assert not Artifact.objects.exists() and _stored_files(media) == []
    event = JobEvent.objects.filter(job=job, type="artifact_refused").get()
    assert "ORG_STORAGE_QUOTA_BYTES" in event.message
    # What fits is stored, and counts.
    small = b"y" * 600
    artifact_store.artifact_store(
        attempt=attempt,
        kind="checkpoint",
        step=2,
        fileobj=io.BytesIO(small),
        sha256=hashlib.sha256(small).hexdigest(),
    )
    with pytest.raises(artifact_store.storage.QuotaExceeded):
        artifact_store.artifact_store(
            attempt=attempt,
            kind="checkpoint",
            step=3,
            fileobj=io.BytesIO(small),
            sha256=hashlib.sha256(small).hexdigest(),
            announced=len(small),
        )
    assert Artifact.objects.count() == 1


def test_the_settings_page_shows_usage_and_quota(
    api_client_for, client_for, member, org, tmp_path, settings
):
    settings.ORG_STORAGE_QUOTA_BYTES = 10 * 1024**2
    size = _upload(api_client_for(org), tmp_path).json()["size_bytes"]

    page = client_for(member).get(f"/o/{org.slug}/settings/")

    assert page.status_code == 200
    text = page.content.decode()
    assert f"({size} bytes)" in text
    assert "10.0\xa0MB (10485760 bytes), 0% used" in text


# -- retention -----------------------------------------------------------------------------


def test_archives_no_job_named_for_the_retention_days_expire_and_twice_is_safe(
    api_client_for, org, tmp_path, settings, media, django_capture_on_commit_callbacks
):
    settings.WORKDIR_RETENTION_DAYS = 30
    client = api_client_for(org)
    ids = {name: _upload(client, tmp_path).json()["id"] for name in "abcde"}
    long_ago = timezone.now() - timedelta(days=31)
    # a: never named; b: named by a job that ended long ago; c: named by a job still
    # running; d: named by a job that ended but was created recently; e: uploaded recently.
    old_job = make_job(org, state=S.SUCCEEDED, container=_container(ids["b"]))
    Job.objects.filter(pk=old_job.pk).update(created_at=long_ago)
    live = make_job(org, state=S.RUNNING, container=_container(ids["c"]))
    Job.objects.filter(pk=live.pk).update(created_at=long_ago)
    make_job(org, state=S.FAILED, container=_container(ids["d"]))
    Workdir.objects.exclude(public_id=ids["e"]).update(created_at=long_ago)

    with django_capture_on_commit_callbacks(execute=True):
        assert tasks.expire() == 2
    assert tasks.expire() == 0

    left = set(Workdir.objects.values_list("public_id", flat=True))
    assert left == {ids["c"], ids["d"], ids["e"]}
    assert sorted(p.name for p in _stored_files(media)) == sorted(
        f"{ids[name]}.tar.gz" for name in "cde"
    )
    settings.WORKDIR_RETENTION_DAYS = 0
    Workdir.objects.update(created_at=long_ago)
    Job.objects.update(state=S.SUCCEEDED, created_at=long_ago)
    assert tasks.expire() == 0 and Workdir.objects.count() == 3


def test_beat_runs_the_expiry_and_the_worker_knows_it():
    entry = django_settings.CELERY_BEAT_SCHEDULE["workdirs-expire"]
    assert (entry["task"], entry["schedule"]) == (
        "workdirs.expire",
        django_settings.WORKDIR_EXPIRE_INTERVAL_S,
    )
    celery_app.loader.import_default_modules()
    assert "workdirs.expire" in celery_app.tasks
