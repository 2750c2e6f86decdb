"""A managed fine-tune through the whole system: the API, a real Celery worker, the local
provider, the runner, `python -m trainer` on a tiny model built here, checkpoint and adapter
uploads — and the adapter it hands back loads with peft and generates text."""

from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from apps.finetunes.services import dataset_upload
from apps.jobs.models import Artifact, JobEvent, MetricPoint
from runner.archive import detect_format, extract
from tests.factories import ProjectFactory
from tests.integration.conftest import TERMINAL

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


def test_a_finetune_trains_uploads_and_its_adapter_generates(
    api, compute_org, tiny_model, demo_data, tmp_path
):
    project = ProjectFactory(organization=compute_org)
    response = api.session.post(
        f"{api.base}/api/v1/projects/{project.public_id}/finetunes",
        json={
            "name": "tiny-lora",
            "model": str(tiny_model),
            "dataset": str(demo_data["alpaca"]),
            "dataset_format": "alpaca",
            "max_steps": 20,
            "save_steps": 10,
            "learning_rate": 0.003,
        },
        headers={"Idempotency-Key": "tiny-lora"},
        timeout=10,
    )
    assert response.status_code == 201, response.text
    job_id = response.json()["id"]
    done = api.wait_state(job_id, TERMINAL, timeout=300)
    logs = [line["message"] for line in api.logs(job_id)]
    assert done["state"] == "succeeded", "\n".join(logs[-30:])

    steps = list(
        MetricPoint.objects.filter(job__public_id=job_id, loss__isnull=False)
        .order_by("step")
        .values_list("step", flat=True)
    )
    assert steps[0] == 1 and steps[-1] == 20
    grading = JobEvent.objects.get(job__public_id=job_id, type="grading")
    assert grading.data["passed"] is True
    kinds = list(
        Artifact.objects.filter(job__public_id=job_id).order_by("id").values_list("kind", "step")
    )
    assert ("checkpoint", 10) in kinds and ("checkpoint", 20) in kinds
    assert kinds[-1][0] == "adapter"

    listed = api.session.get(f"{api.base}/api/v1/compute/jobs/{job_id}/artifacts").json()
    adapter = next(a for a in listed["data"] if a["kind"] == "adapter")
    download = api.session.get(f"{api.base}{adapter['download_url']}", timeout=30)
    assert download.status_code == 200
    adapter_dir = tmp_path / "adapter"
    downloaded = tmp_path / "adapter.tar.gz"
    downloaded.write_bytes(download.content)
    with open(downloaded, "rb") as handle:
        fmt = detect_format(handle)
    extract(downloaded, fmt, adapter_dir)  # the runner's checked unpacking (any 3.11)

    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model), adapter_dir)
    prompt = tokenizer("hello", return_tensors="pt")
    output = model.generate(**prompt, max_new_tokens=5, do_sample=False)
    assert output.shape[1] > prompt["input_ids"].shape[1]
    assert isinstance(tokenizer.decode(output[0]), str)


def test_a_finetune_on_a_dataset_uploaded_to_the_project_runs(
    api, live_stack, compute_org, tiny_model, demo_data, settings
):
    # Uploaded as the web server stores it: the stack's storage (its MEDIA_ROOT).
    settings.MEDIA_ROOT = live_stack.workdir / "var" / "media"
    project = ProjectFactory(organization=compute_org)
    dataset = dataset_upload(
        project=project,
        name="Demo alpaca",
        upload=SimpleUploadedFile("alpaca.jsonl", demo_data["alpaca"].read_bytes()),
        dataset_format="alpaca",
    )
    response = api.session.post(
        f"{api.base}/api/v1/projects/{project.public_id}/finetunes",
        json={
            "name": "uploaded-data",
            "model": str(tiny_model),
            "dataset": dataset.public_id,  # no format: the dataset's own
            "max_steps": 10,
            "save_steps": 10,
            "learning_rate": 0.003,
        },
        headers={"Idempotency-Key": "uploaded-data"},
        timeout=10,
    )
    assert response.status_code == 201, response.text
    job_id = response.json()["id"]

    done = api.wait_state(job_id, TERMINAL, timeout=300)

    logs = [line["message"] for line in api.logs(job_id)]
    assert done["state"] == "succeeded", "\n".join(logs[-30:])
    assert f"fetched input inputs/{dataset.public_id}.jsonl" in logs
    assert logs.index(f"fetched input inputs/{dataset.public_id}.jsonl") < next(
        i for i, line in enumerate(logs) if line.startswith("starting workload: ")
    )
    assert MetricPoint.objects.filter(job__public_id=job_id, step=10).exists()
    assert Artifact.objects.filter(job__public_id=job_id, kind="adapter").exists()
