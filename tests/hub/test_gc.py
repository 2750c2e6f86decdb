"""Garbage collection of hub blobs (apps.hub.gc): what no commit names goes, with its file
and its share of the storage quota; what any commit names, or an upload just used, stays."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.files.storage import default_storage
from django.utils import timezone

from apps.hub import blobs, gc, repos
from apps.hub.models import HubBlob
from config.celery import app as celery_app
from tests.factories import OrganizationFactory

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def media(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path / "media"


@pytest.fixture
def org():
    return OrganizationFactory(slug="acme")


def _repo_with(org, name: str, files: dict[str, bytes]):
    repo = repos.create_repo(org, "model", name)
    additions = {path: blobs.store_bytes(org, data) for path, data in files.items()}
    repos.commit(repo, branch="main", changes=repos.Changes(additions=additions), summary="add")
    return repo, additions


def _age(*blobs_: HubBlob, hours: float = 2) -> None:
    HubBlob.objects.filter(pk__in=[b.pk for b in blobs_]).update(
        used_at=timezone.now() - timedelta(hours=hours)
    )


def test_a_deleted_repository_s_blobs_go_with_their_files_and_quota(org):
    repo, stored = _repo_with(org, "old", {"a.bin": b"a" * 1000, "b.bin": b"b" * 500})
    _, kept = _repo_with(org, "kept", {"b.bin": b"b" * 500, "c.bin": b"c" * 10})
    assert stored["b.bin"].pk == kept["b.bin"].pk  # the same bytes, stored once
    _age(*stored.values(), *kept.values())
    gone = stored["a.bin"]
    assert default_storage.exists(gone.file.name)

    repos.delete_repo(repo)
    assert blobs.bytes_stored(org) == 1510  # counted until collected
    assert gc.collect_garbage() == 1

    assert not HubBlob.objects.filter(pk=gone.pk).exists()
    assert not default_storage.exists(gone.file.name)
    assert blobs.bytes_stored(org) == 510
    assert gc.collect_garbage() == 0  # a second run finds nothing more


def test_a_blob_an_older_commit_names_stays(org):
    repo, stored = _repo_with(org, "tiny", {"w.bin": b"first"})
    repos.commit(
        repo,
        branch="main",
        changes=repos.Changes(additions={}, deleted_files=("w.bin",)),
        summary="rm",
    )
    _age(stored["w.bin"])
    assert gc.collect_garbage() == 0  # the first commit still has it: its history reads
    assert repos.file_at(repos.resolve(repo, "main").parent, "w.bin")


def test_an_upload_not_yet_committed_waits_out_the_grace(org):
    upload = blobs.store_bytes(org, b"on its way to a commit")
    assert gc.collect_garbage() == 0
    _age(upload, hours=0.5)
    assert gc.collect_garbage() == 0  # within the hour
    _age(upload)
    blobs.store_bytes(org, b"on its way to a commit")  # an upload names it again
    assert gc.collect_garbage() == 0
    _age(upload)
    assert gc.collect_garbage() == 1


def test_beat_runs_it_hourly(settings):
    entry = settings.CELERY_BEAT_SCHEDULE["hub-gc"]
    assert entry["task"] == "hub.collect_garbage"
    celery_app.loader.import_default_modules()  # what a worker does at start: autodiscovery
    assert "hub.collect_garbage" in celery_app.tasks
