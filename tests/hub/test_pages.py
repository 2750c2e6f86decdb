"""The Models and Datasets pages: what a member sees of the organization's repositories,
a file downloaded with the session, and another organization's repository not there."""

from __future__ import annotations

import pytest

from apps.accounts.models import Role
from apps.hub import repos
from apps.hub.blobs import store_bytes
from apps.hub.models import RefKind, RepoKind
from tests.factories import MembershipFactory, OrganizationFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def member(client):
    membership = MembershipFactory(organization__slug="acme", role=Role.VIEWER)
    client.force_login(membership.user)
    return membership


def make_model(org, name="tiny"):
    repo = repos.create_repo(org, RepoKind.MODEL, name)
    first = repos.commit(
        repo,
        branch="main",
        summary="weights",
        changes=repos.Changes(
            additions={
                "config.json": store_bytes(org, b'{"a": 1}'),
                "shards/model.safetensors": store_bytes(org, b"w" * 2048),
            }
        ),
    )
    repos.create_ref(repo, RefKind.TAG, "v1", first)
    repos.commit(
        repo,
        branch="main",
        summary="a new config",
        changes=repos.Changes(additions={"config.json": store_bytes(org, b'{"a": 2}')}),
    )
    return repo, first


def test_the_models_page_lists_the_organization_s_repositories_only(client, member):
    make_model(member.organization)
    make_model(OrganizationFactory(slug="other"), name="secret")

    page = client.get("/o/acme/models/")

    assert page.status_code == 200
    text = page.content.decode()
    assert "acme/tiny" in text and "a new config" in text
    assert "secret" not in text
    assert "No datasets yet" in client.get("/o/acme/datasets/").content.decode()


def test_a_repository_page_shows_a_revision_s_files_commits_and_refs(client, member):
    _, first = make_model(member.organization)

    latest = client.get("/o/acme/models/tiny/").content.decode()
    assert "shards/model.safetensors" in latest
    assert "a new config" in latest and "weights" in latest and "initial commit" in latest
    tagged = client.get("/o/acme/models/tiny/?rev=v1").content.decode()
    assert f'<code id="commit-oid">{first.oid}</code>' in tagged
    assert "a new config" not in tagged

    url = f"/o/acme/models/tiny/resolve/{first.oid}/config.json"
    download = client.get(url)
    assert download.status_code == 200
    assert b"".join(download.streaming_content) == b'{"a": 1}'
    assert 'filename="config.json"' in download["Content-Disposition"]
    assert client.get("/o/acme/models/tiny/?rev=nope").status_code == 404


def test_another_organization_s_repository_is_not_found(client, member):
    make_model(OrganizationFactory(slug="other"), name="secret")
    theirs = "/o/other/models/secret/"

    assert client.get(theirs).status_code == 404
    assert client.get("/o/acme/models/secret/").status_code == 404
    assert client.get(f"{theirs}resolve/main/config.json").status_code == 404
    client.logout()
    assert client.get("/o/acme/models/").status_code == 302
