"""The datasets API as a script sees it: upload (multipart or raw body) with the page's row
checks, list, detail with the preview, delete (refused while a job that has not ended uses
it), roles, and other organizations' objects."""

from __future__ import annotations

import hashlib
import json

import pytest

from apps.accounts.models import Role
from apps.finetunes import payloads
from apps.finetunes.models import Dataset
from apps.jobs import services as job_services
from apps.jobs.models import Job
from tests.factories import ProjectFactory, uploaded_dataset

pytestmark = pytest.mark.django_db

ALPACA = [
    {"instruction": "Add the numbers", "input": "2 and 3", "output": "5"},
    {"instruction": "Say hi", "output": "Hello there"},
    {"instruction": "Name a color", "output": "Blue"},
]
BAD_ROW = "row 3: missing field 'output' (alpaca)"


@pytest.fixture(autouse=True)
def media_root(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path / "media"
    return settings.MEDIA_ROOT


def _jsonl(rows) -> bytes:
    return "\n".join(json.dumps(row) for row in rows).encode() + b"\n"


def _url(project, dataset_id: str | None = None) -> str:
    base = f"/api/v1/projects/{project.public_id}/datasets"
    return f"{base}/{dataset_id}" if dataset_id else base


def _multipart(api, project, content: bytes, filename="toy.jsonl", **fields):
    from django.core.files.uploadedfile import SimpleUploadedFile

    upload = SimpleUploadedFile(filename, content, content_type="application/octet-stream")
    return api.post(_url(project), {"file": upload, **fields}, format="multipart")


def _raw(api, project, content: bytes, content_type="application/x-ndjson", **query):
    url = _url(project)
    if query:
        url += "?" + "&".join(f"{key}={value}" for key, value in query.items())
    return api.generic("POST", url, content, content_type=content_type)


def _stored_files(root):
    return sorted(path for path in root.rglob("*") if path.is_file()) if root.exists() else []


def _error(response) -> dict:
    return response.json()["error"]


# -- upload ------------------------------------------------------------------------------


def test_a_multipart_upload_is_checked_stored_and_answered(
    api_client_for, org, project, media_root
):
    content = _jsonl(ALPACA)
    response = _multipart(api_client_for(org), project, content, name="Toy", format="alpaca")

    assert response.status_code == 201, response.json()
    body = response.json()
    dataset = Dataset.objects.get()
    assert body == {
        "id": dataset.public_id,
        "name": "Toy",
        "format": "alpaca",
        "filename": "toy.jsonl",
        "rows": 3,
        "size_bytes": len(content),
        "sha256": hashlib.sha256(content).hexdigest(),
        "created_at": body["created_at"],
        "project": project.public_id,
    }
    assert body["id"].startswith("ds_")
    assert _stored_files(media_root) == [media_root / dataset.file.name]
    assert (media_root / dataset.file.name).read_bytes() == content


def test_a_raw_ndjson_body_is_uploaded_with_its_query(api_client_for, org, project, media_root):
    content = _jsonl(ALPACA) + b"\r\n\n"
    response = _raw(api_client_for(org), project, content, name="Raw", format="alpaca")

    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["name"], body["filename"], body["rows"]) == ("Raw", "Raw.jsonl", 3)
    assert body["sha256"] == hashlib.sha256(content).hexdigest()
    assert body["size_bytes"] == len(content)
    dataset = Dataset.objects.get(public_id=body["id"])
    assert (media_root / dataset.file.name).read_bytes() == content


@pytest.mark.parametrize(
    ("content_type", "filename"),
    [("text/csv", "Q_and_A.csv"), ("text/csv; charset=utf-8", "Q_and_A.csv")],
)
def test_a_raw_csv_body_gets_a_csv_name(api_client_for, org, project, content_type, filename):
    content = b'prompt,completion\n"Q: 1+1?",2\n"Q: capital of France?",Paris\n'
    response = _raw(
        api_client_for(org),
        project,
        content,
        content_type=content_type,
        name="Q and A",
        format="prompt_completion",
    )
    assert response.status_code == 201, response.json()
    assert (response.json()["filename"], response.json()["rows"]) == (filename, 2)


def test_an_octet_stream_body_takes_its_filename_and_the_name_defaults_to_it(
    api_client_for, org, project, media_root
):
    content = b"text\nhello world\nsecond row\n"
    response = _raw(
        api_client_for(org),
        project,
        content,
        content_type="application/octet-stream",
        format="text",
        filename="../../notes.csv",
    )
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["name"], body["filename"], body["rows"]) == ("notes", "notes.csv", 2)
    dataset = Dataset.objects.get()
    assert dataset.file.name == f"datasets/{project.public_id}/notes.csv"


@pytest.mark.parametrize("how", ["multipart", "raw"])
def test_a_bad_row_is_a_400_naming_row_and_field_and_stores_nothing(
    api_client_for, org, project, media_root, how
):
    content = _jsonl([ALPACA[0], ALPACA[1], {"instruction": "No answer"}])
    api = api_client_for(org)
    if how == "multipart":
        response = _multipart(api, project, content, name="Bad", format="alpaca")
    else:
        response = _raw(api, project, content, name="Bad", format="alpaca")

    assert response.status_code == 400
    assert _error(response) == {"type": "invalid_request", "message": BAD_ROW, "param": "file"}
    assert not Dataset.objects.exists()
    assert _stored_files(media_root) == []


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'{"instruction": "a", "output": "b"}\n{not json\n', "line 2: not valid JSON"),
        (b"\xff\xfe not text", "file is not UTF-8 text (byte 0)"),
        (b"\n\n", "file has no rows"),
    ],
)
def test_unreadable_files_are_400_and_named(api_client_for, org, project, content, message):
    response = _raw(api_client_for(org), project, content, format="alpaca")
    assert response.status_code == 400
    assert _error(response)["message"].startswith(message)
    assert _error(response)["param"] == "file"
    assert not Dataset.objects.exists()


def test_another_suffix_is_refused(api_client_for, org, project):
    response = _multipart(api_client_for(org), project, _jsonl(ALPACA), "toy.txt", format="alpaca")
    assert response.status_code == 400
    assert _error(response)["message"] == "file must end in .jsonl or .csv"
    assert not Dataset.objects.exists()


@pytest.mark.parametrize("how", ["multipart", "raw"])
def test_a_file_over_the_limit_is_413_and_stores_nothing(
    api_client_for, org, project, settings, media_root, how
):
    settings.DATASET_MAX_BYTES = 20
    api = api_client_for(org)
    if how == "multipart":
        response = _multipart(api, project, _jsonl(ALPACA), name="Big", format="alpaca")
    else:
        response = _raw(api, project, _jsonl(ALPACA), name="Big", format="alpaca")

    assert response.status_code == 413
    assert _error(response)["type"] == "payload_too_large"
    assert "the limit is 20 bytes" in _error(response)["message"]
    assert not Dataset.objects.exists()
    assert _stored_files(media_root) == []


@pytest.mark.parametrize(
    ("fields", "param", "message"),
    [
        ({"name": "Toy"}, "format", "This field is required."),
        ({"format": "csvish"}, "format", '"csvish" is not a valid choice.'),
        ({"format": "alpaca", "dataset_format": "alpaca"}, "dataset_format", "Unknown field."),
    ],
)
def test_bad_multipart_fields_name_their_param(
    api_client_for, org, project, fields, param, message
):
    response = _multipart(api_client_for(org), project, _jsonl(ALPACA), **fields)
    assert response.status_code == 400
    assert _error(response) == {"type": "invalid_request", "message": message, "param": param}
    assert not Dataset.objects.exists()


def test_a_multipart_body_without_a_file_names_it(api_client_for, org, project):
    response = api_client_for(org).post(_url(project), {"format": "alpaca"}, format="multipart")
    assert response.status_code == 400
    assert _error(response)["param"] == "file"


def test_an_unknown_query_field_of_a_raw_body_is_refused(api_client_for, org, project):
    response = _raw(api_client_for(org), project, _jsonl(ALPACA), format="alpaca", fromat="x")
    assert response.status_code == 400
    assert _error(response)["param"] == "fromat"
    assert not Dataset.objects.exists()


def test_a_json_body_is_415(api_client_for, org, project):
    response = api_client_for(org).post(_url(project), {"format": "alpaca"}, format="json")
    assert response.status_code == 415
    assert _error(response)["type"] == "unsupported_media_type"
    assert "multipart/form-data" in _error(response)["message"]


# -- read --------------------------------------------------------------------------------


def test_the_list_is_newest_first_with_keyset_pages(api_client_for, org, project):
    first = uploaded_dataset(project, name="First")
    second = uploaded_dataset(project, name="Second")
    uploaded_dataset(ProjectFactory(organization=org), name="Elsewhere")
    api = api_client_for(org, role=Role.VIEWER)

    page = api.get(_url(project), {"limit": 1}).json()
    assert [row["id"] for row in page["data"]] == [second.public_id]
    assert page["total"] == 2
    rest = api.get(_url(project), {"limit": 1, "cursor": page["next_cursor"]}).json()
    assert [row["id"] for row in rest["data"]] == [first.public_id]
    assert rest["next_cursor"] is None
    assert set(rest["data"][0]) == {
        "id",
        "name",
        "format",
        "filename",
        "rows",
        "size_bytes",
        "sha256",
        "created_at",
        "project",
    }


def test_a_bad_cursor_is_400(api_client_for, org, project):
    response = api_client_for(org).get(_url(project), {"cursor": "nope"})
    assert response.status_code == 400
    assert _error(response)["param"] == "cursor"


def test_the_detail_has_the_preview_as_training_text(api_client_for, org, project):
    toy = uploaded_dataset(project, name="Toy")
    response = api_client_for(org, role=Role.VIEWER).get(_url(project, toy.public_id))
    assert response.status_code == 200
    body = response.json()
    assert (body["id"], body["rows"], body["preview_error"]) == (toy.public_id, 3, None)
    assert [row["row"] for row in body["preview"]] == [1, 2, 3]
    assert "Add the numbers" in body["preview"][0]["prompt"]
    assert body["preview"][0]["completion"] == "5"


def test_a_missing_file_shows_as_a_preview_error(api_client_for, org, project, media_root):
    toy = uploaded_dataset(project, name="Toy")
    (media_root / toy.file.name).unlink()
    body = api_client_for(org).get(_url(project, toy.public_id)).json()
    assert body["preview"] == []
    assert body["preview_error"]


# -- delete ------------------------------------------------------------------------------


def _finetune(org, project, dataset: str) -> Job:
    config = {"model": "acme/tiny-model", "dataset": dataset, "dataset_format": "alpaca"}
    payload = payloads.job_payload(name="ft", project_id=project.public_id, config=config)
    return job_services.job_create(organization=org, payload=payload, kind=Job.Kind.FINETUNE).job


def test_delete_removes_the_dataset_and_its_file(
    api_client_for, org, project, media_root, django_capture_on_commit_callbacks
):
    toy = uploaded_dataset(project, name="Toy")
    stored = media_root / toy.file.name
    assert stored.exists()
    with django_capture_on_commit_callbacks(execute=True):
        response = api_client_for(org).delete(_url(project, toy.public_id))
    assert response.status_code == 204
    assert not Dataset.objects.exists()
    assert not stored.exists()
    assert api_client_for(org).get(_url(project, toy.public_id)).status_code == 404


def test_delete_is_refused_while_a_job_that_has_not_ended_uses_it(
    api_client_for, org, project, media_root, django_capture_on_commit_callbacks
):
    toy = uploaded_dataset(project, name="Toy")
    other = uploaded_dataset(project, name="Other")
    job = _finetune(org, project, toy.public_id)
    _finetune(org, project, other.public_id)
    api = api_client_for(org)

    response = api.delete(_url(project, toy.public_id))

    assert response.status_code == 409
    error = _error(response)
    assert error["type"] == "dataset_in_use"
    assert job.public_id in error["message"]
    assert Dataset.objects.filter(pk=toy.pk).exists()
    assert (media_root / toy.file.name).exists()

    job_services.job_terminate(job=job)
    assert Job.objects.get(pk=job.pk).state == "terminated"
    with django_capture_on_commit_callbacks(execute=True):
        assert api.delete(_url(project, toy.public_id)).status_code == 204
    assert not (media_root / toy.file.name).exists()
    assert Dataset.objects.filter(pk=other.pk).exists()


def test_a_job_naming_a_hub_dataset_or_a_path_does_not_hold_any(api_client_for, org, project):
    toy = uploaded_dataset(project, name="Toy")
    _finetune(org, project, f"/data/{toy.public_id}.jsonl")
    assert api_client_for(org).delete(_url(project, toy.public_id)).status_code == 204


# -- roles and tenancy -------------------------------------------------------------------


def test_a_viewer_reads_but_cannot_upload_or_delete(api_client_for, org, project, media_root):
    toy = uploaded_dataset(project, name="Toy")
    files_before = _stored_files(media_root)
    viewer = api_client_for(org, role=Role.VIEWER)

    assert viewer.get(_url(project)).status_code == 200
    assert viewer.get(_url(project, toy.public_id)).status_code == 200
    upload = _raw(viewer, project, _jsonl(ALPACA), format="alpaca")
    assert upload.status_code == 403
    assert _error(upload)["type"] == "permission_denied"
    assert viewer.delete(_url(project, toy.public_id)).status_code == 403
    assert list(Dataset.objects.all()) == [toy]
    assert _stored_files(media_root) == files_before


def test_another_orgs_project_and_dataset_are_404(
    api_client_for, org, project, other_project, media_root
):
    theirs = uploaded_dataset(other_project, name="Theirs")
    mine = uploaded_dataset(ProjectFactory(organization=org), name="Mine elsewhere")
    api = api_client_for(org)

    for response in (
        api.get(_url(other_project)),
        api.get(_url(other_project, theirs.public_id)),
        api.delete(_url(other_project, theirs.public_id)),
        _raw(api, other_project, _jsonl(ALPACA), format="alpaca"),
        # Through one's own project: another project's dataset is not there either.
        api.get(_url(project, theirs.public_id)),
        api.delete(_url(project, mine.public_id)),
    ):
        assert response.status_code == 404
        assert _error(response)["type"] == "not_found"
    assert Dataset.objects.count() == 2


def test_an_anonymous_caller_is_401(project):
    from rest_framework.test import APIClient

    response = APIClient().get(_url(project))
    assert response.status_code == 401
