import hashlib
import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from apps.finetunes import services
from apps.finetunes.models import Dataset

pytestmark = pytest.mark.django_db

URL = "/o/acme/projects/vision/datasets/"


@pytest.fixture(autouse=True)
def media_root(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path
    return tmp_path


def _jsonl(rows) -> bytes:
    return "\n".join(json.dumps(row) for row in rows).encode() + b"\n"


ALPACA = [
    {"instruction": "Add the numbers", "input": "2 and 3", "output": "5"},
    {"instruction": "Say hi", "output": "Hello there"},
    {"instruction": "Name a color", "output": "Blue"},
]


def _post(client, content: bytes, filename: str, dataset_format: str, name: str = "Toy"):
    upload = SimpleUploadedFile(filename, content, content_type="application/octet-stream")
    return client.post(URL, {"name": name, "file": upload, "dataset_format": dataset_format})


def _stored_files(root):
    return [path for path in root.rglob("*") if path.is_file()]


def test_a_member_uploads_an_alpaca_jsonl_and_sees_the_preview(
    client_for, member, project, media_root
):
    client = client_for(member)
    response = _post(client, _jsonl(ALPACA) + b"\n\n", "toy.jsonl", "alpaca")
    assert response.status_code == 302
    dataset = Dataset.objects.get()
    assert response["Location"] == f"{URL}{dataset.public_id}/"
    assert dataset.public_id.startswith("ds_")
    assert dataset.rows == 3
    assert dataset.dataset_format == "alpaca"
    assert dataset.uploaded_by == member
    assert dataset.size_bytes == len(_jsonl(ALPACA)) + 2
    assert dataset.file.name == f"datasets/{project.public_id}/toy.jsonl"
    assert dataset.sha256 == hashlib.sha256(_jsonl(ALPACA) + b"\n\n").hexdigest()
    assert _stored_files(media_root) == [media_root / dataset.file.name]

    body = client.get(response["Location"]).content.decode()
    assert "### Instruction:\nAdd the numbers" in body
    assert "2 and 3" in body
    assert "Hello there" in body
    # Named by its id, never by a path on the server (the storage may have none).
    assert f'<code id="dataset-id">{dataset.public_id}</code>' in body
    assert str(media_root) not in body

    listing = client.get(URL).content.decode()
    assert "Toy" in listing and "Alpaca" in listing and dataset.public_id in listing
    assert str(media_root) not in listing


def test_a_csv_prompt_completion_upload(client_for, member, project):
    content = b'prompt,completion\n"Q: 1+1?",2\n"Q: capital of France?",Paris\n'
    response = _post(client_for(member), content, "qa.csv", "prompt_completion")
    assert response.status_code == 302
    dataset = Dataset.objects.get()
    assert dataset.rows == 2
    preview = services.dataset_preview(dataset)
    assert [(row.prompt, row.completion) for row in preview] == [
        ("Q: 1+1?", "2"),
        ("Q: capital of France?", "Paris"),
    ]


def test_a_csv_chatml_upload_decodes_json_cells(client_for, member, project):
    messages = json.dumps(
        [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]
    )
    content = b"messages\n" + ('"' + messages.replace('"', '""') + '"\n').encode()
    assert _post(client_for(member), content, "chat.csv", "chatml").status_code == 302
    assert Dataset.objects.get().rows == 1


def test_a_chatml_jsonl_upload(client_for, member, project):
    rows = [
        {
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "What is 2+2?"},
                {"role": "assistant", "content": "Four."},
            ]
        },
        {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hey"}]},
    ]
    client = client_for(member)
    response = _post(client, _jsonl(rows), "chat.jsonl", "chatml")
    assert response.status_code == 302
    dataset = Dataset.objects.get()
    assert dataset.rows == 2
    body = client.get(response["Location"]).content.decode()
    assert "user: What is 2+2?" in body
    assert "Four." in body


def test_pretokenized_preview_shows_token_counts():
    rows = [{"input_ids": [1, 2, 3, 4], "labels": [-100, -100, 3, 4]}, {"input_ids": [5, 6]}]
    preview = services.dataset_preview(rows, dataset_format="pretokenized")
    assert [(row.prompt, row.completion) for row in preview] == [
        ("4 token ids", "2 trained token ids"),
        ("2 token ids", "2 trained token ids"),
    ]
    assert len(services.dataset_preview(ALPACA * 3, dataset_format="alpaca")) == 5


def test_a_bad_row_shows_the_error_at_the_file_field_and_stores_nothing(
    client_for, member, project, media_root
):
    rows = [ALPACA[0], ALPACA[1], {"instruction": "No answer"}]
    response = _post(client_for(member), _jsonl(rows), "bad.jsonl", "alpaca")
    assert response.status_code == 400
    form = response.context["form"]
    assert form.errors["file"] == ["row 3: missing field 'output' (alpaca)"]
    body = response.content.decode()
    assert "row 3: missing field &#x27;output&#x27; (alpaca)" in body
    assert body.index("row 3: missing field") < body.index('name="dataset_format"')
    assert not Dataset.objects.exists()
    assert _stored_files(media_root) == []


def test_an_oversized_file_is_refused(client_for, member, project, settings, media_root):
    settings.DATASET_MAX_BYTES = 20
    response = _post(client_for(member), _jsonl(ALPACA), "big.jsonl", "alpaca")
    assert response.status_code == 413
    assert "the limit is 20 bytes" in response.context["form"].errors["file"][0]
    assert not Dataset.objects.exists()
    assert _stored_files(media_root) == []


def test_a_line_that_is_not_json_is_named(client_for, member, project, media_root):
    content = _jsonl(ALPACA[:1]) + b"{not json\n"
    response = _post(client_for(member), content, "broken.jsonl", "alpaca")
    assert response.status_code == 400
    assert response.context["form"].errors["file"][0].startswith("line 2: not valid JSON")
    assert not Dataset.objects.exists()
    assert _stored_files(media_root) == []


def test_another_suffix_is_refused(client_for, member, project):
    response = _post(client_for(member), _jsonl(ALPACA), "toy.txt", "alpaca")
    assert response.status_code == 400
    assert "must end in .jsonl or .csv" in response.content.decode()
    assert not Dataset.objects.exists()


def test_a_viewer_sees_the_list_but_cannot_upload(client_for, viewer, project, media_root):
    client = client_for(viewer)
    response = client.get(URL)
    assert response.status_code == 200
    assert "No datasets yet." in response.content.decode()
    assert 'enctype="multipart/form-data"' not in response.content.decode()
    assert _post(client, _jsonl(ALPACA), "toy.jsonl", "alpaca").status_code == 403
    assert not Dataset.objects.exists()
    assert _stored_files(media_root) == []


def test_another_org_gets_404(client_for, outsider, member, project):
    client = client_for(member)
    assert _post(client, _jsonl(ALPACA), "toy.jsonl", "alpaca").status_code == 302
    dataset = Dataset.objects.get()
    other = client_for(outsider)
    assert other.get(URL).status_code == 404
    assert other.get(f"{URL}{dataset.public_id}/").status_code == 404
    assert _post(other, _jsonl(ALPACA), "toy.jsonl", "alpaca").status_code == 404
    assert Dataset.objects.count() == 1


def test_the_project_page_links_the_datasets_tab(client_for, member, project):
    body = client_for(member).get("/o/acme/projects/vision/").content.decode()
    assert f'href="{URL}"' in body


def test_a_form_missing_a_field_is_400(client_for, member, project, media_root):
    upload = SimpleUploadedFile("toy.jsonl", _jsonl(ALPACA))
    response = client_for(member).post(URL, {"file": upload, "dataset_format": "alpaca"})
    assert response.status_code == 400
    assert response.context["form"].errors["name"] == ["This field is required."]
    assert not Dataset.objects.exists()
    assert _stored_files(media_root) == []
