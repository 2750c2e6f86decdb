"""The job page's "Run again" and "Edit and run", and how a page shows re-runs and the job
file it was submitted from."""

from __future__ import annotations

import html
import re

import pytest
from django.test import Client

from apps.finetunes import payloads
from apps.jobs import services
from apps.jobs.models import Job
from apps.secrets import services as secret_services
from tests.jobs.helpers import job_body, make_job

pytestmark = pytest.mark.django_db


def _page(client, job: Job) -> str:
    response = client.get(f"/o/acme/jobs/{job.public_id}/")
    assert response.status_code == 200
    return html.unescape(response.content.decode())


def _text(page: str) -> str:
    """What a reader sees: the page without its tags, runs of white space as one."""
    return " ".join(re.sub(r"<[^>]+>", "", page).split())


def _field(page: str, form_id: str, name: str) -> str:
    """The value an input (or the text a textarea) of the New Job page holds."""
    tag = re.search(rf'<(input|textarea)[^>]*id="{form_id}-{name}"[^>]*>', page)
    assert tag, f"{form_id}-{name} is not on the page"
    if tag.group(1) == "textarea":
        return page[tag.end() : page.index("</textarea>", tag.end())].strip("\n")
    value = re.search(r'value="([^"]*)"', tag.group(0))
    return value.group(1) if value else ""


def test_run_again_makes_a_linked_job_once_per_page_and_viewers_cannot(
    client_for, member, viewer, org
):
    original = make_job(org, state="succeeded")
    page = _page(client_for(member), original)
    assert "Run again" in page and "Edit and run" in page
    key = re.search(r'name="idempotency_key" value="([0-9a-f]+)"', page).group(1)
    assert "Run again" not in _page(client_for(viewer), original)
    url = f"/o/acme/jobs/{original.public_id}/rerun/"
    assert client_for(viewer).post(url, {"idempotency_key": key}).status_code == 403

    first = client_for(member).post(url, {"idempotency_key": key})
    second = client_for(member).post(url, {"idempotency_key": key})  # a double click

    new = Job.objects.get(rerun_of=original)
    assert first.status_code == second.status_code == 302
    assert first["Location"] == second["Location"] == f"/o/acme/jobs/{new.public_id}/"
    assert new.spec == original.spec
    assert f"Re-run of {original.name} ({original.public_id})." in _text(
        _page(client_for(member), new)
    )
    assert f"Re-runs: {new.public_id}." in _text(_page(client_for(member), original))


def test_run_again_needs_a_csrf_token(member, org):
    original = make_job(org, state="succeeded")
    client = Client(enforce_csrf_checks=True)
    client.force_login(member)
    assert client.post(f"/o/acme/jobs/{original.public_id}/rerun/").status_code == 403
    assert not Job.objects.filter(rerun_of=original).exists()


def test_another_organizations_job_cannot_be_run_again_or_edited(client_for, outsider, org):
    original = make_job(org, state="succeeded")
    client = client_for(outsider)
    assert client.post(f"/o/acme/jobs/{original.public_id}/rerun/").status_code == 404
    edit = client.get(f"/o/globex/projects/secret-plans/jobs/new/?from={original.public_id}")
    assert edit.status_code == 404
    assert not Job.objects.filter(rerun_of=original).exists()


def test_edit_and_run_prefills_the_form_and_links_the_new_job(client_for, member, org):
    secret = secret_services.secret_create(organization=org, name="hf", data={"HF_TOKEN": "x"})
    original = make_job(
        org,
        state="failed",
        container={
            "image": "python:3.11-slim",
            "command": ["python", "train.py", "--lr", "1e-4"],
            "env": {"EPOCHS": "3"},
            "secret_env": {"HF_TOKEN": {"secret_id": secret.public_id, "key": "HF_TOKEN"}},
            "files": {"train.py": "print('training')\n"},
        },
        limits={"max_cost_usd": "2.5"},
    )
    client = client_for(member)
    page_url = "/o/acme/projects/default/jobs/new/"
    page = html.unescape(client.get(f"{page_url}?from={original.public_id}").content.decode())

    assert f"Editing a copy of {original.name} ({original.public_id})" in _text(page)
    assert _field(page, "container", "name") == "train"
    assert _field(page, "container", "image") == "python:3.11-slim"
    assert _field(page, "container", "command") == "python train.py --lr 1e-4"
    assert _field(page, "container", "env") == "EPOCHS=3"
    assert _field(page, "container", "secrets") == "HF_TOKEN=hf:HF_TOKEN"
    assert _field(page, "container", "max_cost_usd") == "2.5"
    assert f'name="rerun_of" value="{original.public_id}"' in page

    response = client.post(
        page_url,
        {
            "form": "container",
            "rerun_of": original.public_id,
            "name": "train",
            "image": "python:3.11-slim",
            "command": "python train.py --lr 2e-4",
            "env": "EPOCHS=3",
            "secrets": "HF_TOKEN=hf:HF_TOKEN",
            "accelerator": "cpu",
            "gpu_count": 1,
            "disk_gb": 10,
            "priority_class": "standard",
            "max_cost_usd": "2.5",
        },
    )

    new = Job.objects.get(rerun_of=original)
    assert response.status_code == 302 and response["Location"].endswith(f"/{new.public_id}/")
    assert new.spec["container"]["command"] == ["python", "train.py", "--lr", "2e-4"]
    assert new.spec["container"]["files"] == {"train.py": "print('training')\n"}  # carried
    assert {**new.spec, "container": {}} == {**original.spec, "container": {}}


def test_the_page_shows_the_job_file(client_for, member, org):
    text = "# my job\nname: train\n"
    created = services.job_create(
        organization=org,
        payload=job_body(job_file={"name": "job.yaml", "content": text}),
        idempotency_key="file",
    )
    page = _page(client_for(member), created.job)
    assert "Job file job.yaml" in _text(page)
    assert "# my job\nname: train" in page


def test_edit_and_run_of_a_finetune_fills_the_finetune_form(client_for, member, org, project):
    created = services.job_create(
        organization=org,
        payload=payloads.payload_from_api(
            {
                "name": "ft",
                "model": "/models/tiny",
                "dataset": "/data/alpaca.jsonl",
                "dataset_format": "chatml",
                "max_steps": 40,
                "learning_rate": 0.0003,
            },
            project=project,
        ),
        idempotency_key="ft",
        kind=Job.Kind.FINETUNE,
    )
    page = html.unescape(
        client_for(member)
        .get(f"/o/acme/projects/vision/jobs/new/?from={created.job.public_id}")
        .content.decode()
    )
    assert _field(page, "finetune", "model") == "/models/tiny"
    assert _field(page, "finetune", "dataset") == "/data/alpaca.jsonl"
    assert _field(page, "finetune", "max_steps") == "40"
    assert _field(page, "finetune", "learning_rate") == "0.0003"
    assert 'id="finetune-dataset_format"' in page
    assert re.search(r'<option value="chatml" selected>', page)
    assert _field(page, "container", "name") == ""  # only the job's own kind's form
