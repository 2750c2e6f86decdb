"""Endpoints serving an adapter from the organization's hub (`{"hub": "<org>/<name>@rev"}`):
pinned to the commit the revision names when the target is set, checked to be an adapter
of the endpoint's base model, and the archive the engine is sent made of that commit."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile

import pytest

from apps.hub import blobs, repos
from apps.serving import adapters
from apps.serving.models import EndpointRevision
from tests.factories import OrganizationFactory

pytestmark = pytest.mark.django_db

BASE = "acme/tiny"


@pytest.fixture(autouse=True)
def media(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path / "media"


def _adapter_repo(org, name="support-lora", base=BASE, extra=None):
    repo = repos.create_repo(org, "model", name)
    files = {
        "adapter_config.json": json.dumps({"base_model_name_or_path": base, "r": 8}).encode(),
        "adapter_model.safetensors": b"weights v1",
        "checkpoint-2/adapter_model.safetensors": b"an older one",
        **(extra or {}),
    }
    additions = {path: blobs.store_bytes(org, data) for path, data in files.items()}
    first = repos.commit(repo, branch="main", changes=repos.Changes(additions), summary="v1")
    repos.create_ref(repo, "tag", "v1", first)
    newer = {"adapter_model.safetensors": blobs.store_bytes(org, b"weights v2")}
    repos.commit(repo, branch="main", changes=repos.Changes(newer), summary="v2")
    return repo, first


def _create(client, project, target, base_model=f"{BASE}@v1"):
    body = {"name": "support-bot", "project": project.public_id, "base_model": base_model}
    return client.post("/api/v1/endpoints", {**body, "target": target}, format="json")


def test_an_endpoint_serves_a_hub_adapter_pinned_to_the_commit_its_revision_names(
    org, project, api_client_for
):
    repo, first = _adapter_repo(org)

    response = _create(api_client_for(org), project, {"hub": "acme/support-lora@v1"})

    assert response.status_code == 201, response.content
    [revision] = response.json()["revisions"]
    assert revision["hub"] == {"revision": "acme/support-lora@v1", "commit": first.oid}
    assert revision["artifact"] is None and revision["job_id"] is None
    stored = EndpointRevision.objects.get()
    assert stored.hub_commit == first
    # Deleting the repository while an endpoint serves it is refused.
    client = api_client_for(org)
    deleted = client.generic(
        "DELETE",
        "/hf/api/repos/delete",
        json.dumps({"name": "support-lora", "type": "model"}),
        content_type="application/json",
    )
    assert deleted.status_code == 409, deleted.content
    assert repos.find_repo(org, "model", "support-lora") == repo


def test_the_archive_the_engine_gets_is_the_commit_s_top_level_files(org):
    _, first = _adapter_repo(org)
    revision = EndpointRevision(hub_commit=first)

    with adapters.archive_of(revision) as archive:
        body = b"".join(archive.chunks())

    assert (archive.size, archive.sha256) == (len(body), hashlib.sha256(body).hexdigest())
    with tarfile.open(fileobj=io.BytesIO(body), mode="r:gz") as tar:
        names = sorted(tar.getnames())
        weights = tar.extractfile("adapter_model.safetensors").read()
    assert names == ["adapter_config.json", "adapter_model.safetensors"]
    assert weights == b"weights v1"  # the pinned commit's, not main's newer one


@pytest.mark.parametrize(
    ("target", "status", "error_type"),
    [
        ({"hub": "acme/support-lora@v9"}, 404, "revision_not_found"),
        ({"hub": "acme/nothing"}, 404, "repo_not_found"),
        ({"hub": "globex/theirs"}, 404, "not_found"),
        ({"hub": "acme/plain"}, 400, "not_an_adapter"),
        ({"hub": ""}, 400, "invalid_request"),
    ],
)
def test_a_hub_target_that_is_not_an_adapter_of_this_organization_is_refused(
    org, project, api_client_for, target, status, error_type
):
    _adapter_repo(org)
    plain = repos.create_repo(org, "model", "plain")
    readme = {"README.md": blobs.store_bytes(org, b"# no adapter")}
    repos.commit(plain, branch="main", changes=repos.Changes(readme), summary="doc")
    theirs = OrganizationFactory(slug="globex")
    _adapter_repo(theirs, name="theirs")

    response = _create(api_client_for(org), project, target)

    assert response.status_code == status, response.content
    assert response.json()["error"]["type"] == error_type
    assert not EndpointRevision.objects.exists()


def test_a_hub_adapter_of_another_base_model_is_refused(org, project, api_client_for):
    _adapter_repo(org, base="acme/other-base")

    response = _create(api_client_for(org), project, {"hub": "acme/support-lora"})

    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["type"], error["param"]) == ("base_model_mismatch", "target")
    assert "acme/support-lora@main was trained on 'acme/other-base'" in error["message"]


def test_the_endpoint_page_names_the_hub_revision_and_its_commit(
    org, project, api_client_for, client_for, member
):
    _, first = _adapter_repo(org)
    created = _create(api_client_for(org), project, {"hub": "acme/support-lora@v1"}).json()

    page = client_for(member).get(f"/o/acme/endpoints/{created['id']}/").content.decode()

    assert 'hub adapter <a href="/o/acme/models/support-lora/">acme/support-lora@v1</a>' in page
    assert first.oid[:12] in page
