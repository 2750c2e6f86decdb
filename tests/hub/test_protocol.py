"""The hub's protocol endpoints, request by request: what a bad commit, a stale parent, a
range or a path outside the tree is answered, and that nothing is half-written. (The stock
client against the real server: test_client_run.py.)"""

from __future__ import annotations

import base64
import hashlib
import json

import pytest

from apps.accounts import services as account_services
from apps.accounts.models import Role
from apps.hub.models import HubBlob, HubCommit, HubFile
from tests.factories import OrganizationFactory

pytestmark = pytest.mark.django_db

API = "/hf/api/models/acme/tiny"


@pytest.fixture
def org():
    return OrganizationFactory(slug="acme")


@pytest.fixture
def hub(client, org):
    _, key = account_services.api_key_create(organization=org, name="hub")
    auth = {"HTTP_AUTHORIZATION": f"Bearer {key}"}

    class Hub:
        def post(self, path, body, content_type="application/json", **extra):
            data = json.dumps(body) if content_type == "application/json" else body
            return client.post(path, data=data, content_type=content_type, **auth, **extra)

        def get(self, path, **extra):
            return client.get(path, **auth, **extra)

        def head(self, path, **extra):
            return client.head(path, **auth, **extra)

        def commit(self, *operations, summary="change", parent=None, raw=None):
            header = {"summary": summary, "description": ""}
            if parent:
                header["parentCommit"] = parent
            lines = [json.dumps({"key": "header", "value": header})]
            lines += [json.dumps(op) for op in operations]
            body = raw if raw is not None else ("\n".join(lines) + "\n").encode()
            return self.post(f"{API}/commit/main", body, content_type="application/x-ndjson")

    made = Hub()
    assert made.post("/hf/api/repos/create", {"name": "tiny"}).status_code == 200
    return made


def add(path: str, data: bytes) -> dict:
    return {
        "key": "file",
        "value": {"content": base64.b64encode(data).decode(), "path": path, "encoding": "base64"},
    }


def head_oid(hub) -> str:
    return hub.get(API).json()["sha"]


def test_a_commit_adds_files_and_a_later_one_deletes_a_folder(hub):
    assert hub.commit(add("a.txt", b"alpha"), add("dir/b.txt", b"beta")).status_code == 200
    answer = hub.commit({"key": "deletedFolder", "value": {"path": "dir/"}})

    assert answer.status_code == 200, answer.content
    commit = answer.json()
    assert commit["commitUrl"] == f"http://testserver/hf/acme/tiny/commit/{commit['commitOid']}"
    assert [s["rfilename"] for s in hub.get(API).json()["siblings"]] == ["a.txt"]


def test_the_client_s_streamed_layout_and_a_plain_json_line_store_the_same_bytes(hub):
    data = bytes(range(256)) * 5000  # over one read buffer, not a multiple of 3
    streamed = add("streamed.bin", data)
    plain = {"key": "file", "value": {"path": "plain.bin", "content": streamed["value"]["content"]}}

    assert hub.commit(streamed, plain).status_code == 200

    blob = HubBlob.objects.get()
    assert blob.sha256 == hashlib.sha256(data).hexdigest()
    assert HubFile.objects.filter(blob=blob).count() == 2
    assert hub.get("/hf/acme/tiny/resolve/main/streamed.bin").getvalue() == data


@pytest.mark.parametrize(
    ("body", "error_type"),
    [
        (b'{"key": "file", "value": {}}\n', "invalid_request"),  # no header line
        (b'{"key": "header", "value": {"summary": ""}}\n', "invalid_request"),
        (b'{"key": "header", "value": {"summary": "s"}}\nnot json\n', "invalid_request"),
        (
            b'{"key": "header", "value": {"summary": "s"}}\n'
            b'{"key": "file", "value": {"content": "!!!!", "path": "a", "encoding": "base64"}}\n',
            "invalid_request",
        ),
        (
            b'{"key": "header", "value": {"summary": "s"}}\n'
            b'{"key": "file", "value": {"content": "QUFB", "path": "../a"}}\n',
            "invalid_request",
        ),
        (
            b'{"key": "header", "value": {"summary": "s"}}\n'
            b'{"key": "rename", "value": {"path": "a"}}\n',
            "invalid_request",
        ),
        (
            b'{"key": "header", "value": {"summary": "s"}}\n'
            b'{"key": "deletedFile", "value": {"path": "nope.txt"}}\n',
            "entry_not_found",
        ),
        (
            b'{"key": "header", "value": {"summary": "s"}}\n'
            b'{"key": "lfsFile", "value": {"path": "w.bin", "algo": "sha256", "oid": "'
            + b"a" * 64
            + b'", "size": 3}}\n',
            "invalid_request",
        ),
    ],
)
def test_a_bad_commit_is_refused_with_its_type_and_leaves_the_repository_as_it_was(
    hub, body, error_type
):
    before = head_oid(hub)
    answer = hub.commit(raw=body)

    assert answer.status_code in (400, 404), answer.content
    assert answer.json()["error_type"] == error_type
    assert answer["X-Error-Message"]
    assert head_oid(hub) == before
    assert HubCommit.objects.count() == 1


def test_a_commit_on_a_stale_parent_is_refused_412(hub):
    stale = head_oid(hub)
    assert hub.commit(add("a.txt", b"first")).status_code == 200

    answer = hub.commit(add("a.txt", b"second"), parent=stale)

    assert answer.status_code == 412
    assert answer.json()["error_type"] == "parent_mismatch"
    assert hub.get("/hf/acme/tiny/resolve/main/a.txt").getvalue() == b"first"


def test_a_path_cannot_be_a_file_and_a_folder(hub):
    assert hub.commit(add("model", b"x")).status_code == 200

    answer = hub.commit(add("model/weights.bin", b"y"))

    assert answer.status_code == 400
    assert "both a file and a folder" in answer.json()["error"]


def test_downloads_answer_ranges_and_the_headers_the_client_caches_by(hub):
    data = b"0123456789" * 10
    oid = hub.commit(add("digits.txt", data)).json()["commitOid"]
    url = "/hf/acme/tiny/resolve/main/digits.txt"

    head = hub.head(url)
    assert head.status_code == 200
    assert head["X-Repo-Commit"] == oid
    assert head["Content-Length"] == "100"
    git_oid = hashlib.sha1(b"blob 100\0" + data).hexdigest()
    assert head["ETag"] == f'"{git_oid}"'

    part = hub.get(url, HTTP_RANGE="bytes=90-")
    assert part.status_code == 206
    assert part["Content-Range"] == "bytes 90-99/100"
    assert part.getvalue() == data[90:]
    assert hub.get(url, HTTP_RANGE="bytes=-5").getvalue() == data[-5:]
    assert hub.get(url, HTTP_RANGE="bytes=100-").status_code == 416

    missing = hub.head("/hf/acme/tiny/resolve/main/nope.txt")
    assert missing.status_code == 404
    assert missing["X-Error-Code"] == "EntryNotFound"
    assert missing["X-Repo-Commit"] == oid
    by_commit = hub.get(f"/hf/acme/tiny/resolve/{oid}/digits.txt")
    assert by_commit.getvalue() == data


def test_preupload_names_unchanged_files_and_refuses_an_oversized_one(hub, settings):
    data = b"same bytes"
    hub.commit(add("kept.txt", data))
    settings.HUB_MAX_FILE_BYTES = 1000
    files = [
        {"path": "kept.txt", "size": len(data), "sample": ""},
        {"path": "new.txt", "size": 3, "sample": ""},
    ]

    answer = hub.post(f"{API}/preupload/main", {"files": files}).json()

    assert answer["files"] == [
        {
            "path": "kept.txt",
            "uploadMode": "regular",
            "shouldIgnore": False,
            "oid": hashlib.sha1(b"blob 10\0" + data).hexdigest(),
        },
        {"path": "new.txt", "uploadMode": "regular", "shouldIgnore": False, "oid": None},
    ]
    too_big = hub.post(
        f"{API}/preupload/main", {"files": [{"path": "w.bin", "size": 1001, "sample": ""}]}
    )
    assert too_big.status_code == 413
    inline = hub.commit(add("w.bin", b"x" * 1001))
    assert inline.status_code == 413
    assert not HubBlob.objects.filter(size_bytes=1001).exists()


def test_a_commit_over_the_storage_quota_stores_nothing(hub, org):
    org.storage_quota_bytes = 50
    org.save()

    answer = hub.commit(add("big.bin", b"x" * 100))

    assert answer.status_code == 413
    assert answer.json()["error_type"] == "quota_exceeded"
    assert not HubBlob.objects.exists()
    assert HubCommit.objects.count() == 1


def test_names_that_could_escape_or_collide_are_refused(hub):
    assert hub.post("/hf/api/repos/create", {"name": "../etc"}).status_code == 400
    assert hub.post("/hf/api/repos/create", {"name": "tiny"}).status_code == 409
    assert hub.post("/hf/api/repos/create", {"name": "x", "type": "space"}).status_code == 400
    tag = hub.post(f"{API}/tag/main", {"tag": "a/b"})
    assert tag.status_code == 400
    assert hub.post(f"{API}/branch/{'f' * 40}", {}).status_code == 400


def test_a_viewer_key_reads_but_cannot_write(client, hub, org):
    _, key = account_services.api_key_create(organization=org, name="v", role=Role.VIEWER)
    auth = {"HTTP_AUTHORIZATION": f"Bearer {key}"}

    assert client.get(API, **auth).status_code == 200
    refused = client.post(f"{API}/branch/dev", data="{}", content_type="application/json", **auth)
    assert refused.status_code == 403
    assert "viewer" in refused.json()["error"]


def test_an_unknown_key_and_an_unknown_path_are_refused_in_the_client_s_shape(client, hub):
    bad = client.get(API, HTTP_AUTHORIZATION="Bearer ty_nope_nope")
    assert bad.status_code == 401
    assert bad["X-Error-Message"] == "Invalid credentials in Authorization header"
    assert client.get("/hf/api/agent-harnesses").status_code == 404


@pytest.mark.parametrize(
    ("readme", "card"),
    [
        (b"---\nlibrary_name: peft\ntags:\n- lora\n---\n# Tiny\n", {"library_name": "peft"}),
        (b"---\n: [unclosed\n---\n", None),  # metadata that does not parse is left out
        (b"---\n- a list, not a mapping\n---\n", None),
        (b"# no metadata\n", None),
    ],
)
def test_repo_info_carries_the_readme_s_metadata_when_it_parses(hub, readme, card):
    assert hub.commit(add("README.md", readme)).status_code == 200

    info = hub.get(API)

    assert info.status_code == 200
    if card is None:
        assert "cardData" not in info.json() and info.json()["tags"] == []
    else:
        assert info.json()["cardData"] == {**card, "tags": ["lora"]}
        assert (info.json()["tags"], info.json()["library_name"]) == (["lora"], "peft")
