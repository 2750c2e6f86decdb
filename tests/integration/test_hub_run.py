"""Workloads and the hub: every job gets HF_ENDPOINT and an HF_TOKEN of its attempt, and the
stock Hugging Face client inside it reads its organization's repositories, nothing else,
and only while the attempt lasts. (In a container with a network of its own:
test_containers_run.py.)"""

from __future__ import annotations

import base64
import json

import pytest
import requests

from apps.accounts import services as account_services
from apps.jobs.execution.tokens import hub_token_for
from apps.jobs.models import Attempt, LogLine
from tests.factories import OrganizationFactory, ProjectFactory
from tests.integration.conftest import TERMINAL

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

READ_WITH_THE_STOCK_CLIENT = """
import os
from huggingface_hub import hf_hub_download
from huggingface_hub.errors import RepositoryNotFoundError, HfHubHTTPError
print("endpoint=" + os.environ["HF_ENDPOINT"])
print("token=" + os.environ["HF_TOKEN"])
print("content=" + open(hf_hub_download("{own}", "hello.txt")).read())
try:
    hf_hub_download("{other}", "hello.txt")
    print("other=read")
except RepositoryNotFoundError:
    print("other=not found")
try:
    from huggingface_hub import HfApi
    HfApi().upload_file(path_or_fileobj=b"x", path_in_repo="x.txt", repo_id="{own}")
    print("write=ok")
except HfHubHTTPError as err:
    print(f"write={{err.response.status_code}}")
"""


def hub_repo_with_a_file(stack, org, name: str, text: str) -> str:
    """A model repository of `org` holding hello.txt, made through the server's hub as a
    user would (its storage is the server's)."""
    return hub_repo_with_files(stack, org, name, {"hello.txt": text.encode()})


def hub_repo_with_files(stack, org, name: str, files: dict[str, bytes]) -> str:
    _, key = account_services.api_key_create(organization=org, name=f"hub-{name}")
    auth = {"Authorization": f"Bearer {key}"}
    made = requests.post(f"{stack.url}/hf/api/repos/create", json={"name": name}, headers=auth)
    assert made.status_code == 200, made.text
    lines = [{"key": "header", "value": {"summary": "hello"}}]
    for path, data in files.items():
        content = base64.b64encode(data).decode()
        lines.append({"key": "file", "value": {"content": content, "path": path}})
    body = "\n".join(json.dumps(item) for item in lines)
    repo_id = f"{org.slug}/{name}"
    committed = requests.post(
        f"{stack.url}/hf/api/models/{repo_id}/commit/main",
        data=body,
        headers={**auth, "Content-Type": "application/x-ndjson"},
    )
    assert committed.status_code == 200, committed.text
    return repo_id


def _user_lines(job_id: str) -> list[str]:
    return list(
        LogLine.objects.filter(job__public_id=job_id, source="user")
        .order_by("attempt", "seq", "id")
        .values_list("message", flat=True)
    )


def test_a_job_reads_its_organization_s_hub_with_the_attempt_s_token(api, compute_org, live_stack):
    own = hub_repo_with_a_file(live_stack, compute_org, "greeting", "hello from the hub")
    other = hub_repo_with_a_file(live_stack, OrganizationFactory(slug="elsewhere"), "x", "no")
    code = READ_WITH_THE_STOCK_CLIENT.format(own=own, other=other)

    job = api.submit(command=["python", "-c", code], env={"HF_HOME": "hf-home"})
    done = api.wait_state(job["id"], TERMINAL, timeout=90)

    lines = _user_lines(job["id"])
    assert done["state"] == "succeeded", lines
    assert f"endpoint={live_stack.url}/hf" in lines
    assert "token=***" in lines  # the attempt's token is masked like a secret
    assert "content=hello from the hub" in lines
    assert "other=not found" in lines
    assert "write=403" in lines  # a workload's token reads, it does not write
    # The token died with its attempt.
    token = hub_token_for(Attempt.objects.get(job__public_id=job["id"]).token_nonce)
    after = requests.get(
        f"{live_stack.url}/hf/api/models/{own}", headers={"Authorization": f"Bearer {token}"}
    )
    assert after.status_code == 401


def test_the_job_s_own_hf_token_wins_and_hf_endpoint_is_the_platform_s(api):
    job = api.submit(command=["sh", "-c", 'echo "token=$HF_TOKEN"'], env={"HF_TOKEN": "hf_mine"})
    done = api.wait_state(job["id"], TERMINAL, timeout=60)
    assert done["state"] == "succeeded"
    assert _user_lines(job["id"]) == ["token=hf_mine"]

    refused = api.session.post(
        f"{api.base}/api/v1/compute/jobs",
        json={
            "name": "x",
            "compute": {"accelerator": "cpu", "gpu_count": 1, "ephemeral_disk_gb": 1},
            "container": {"image": "local", "command": ["true"], "env": {"HF_ENDPOINT": "x"}},
        },
        headers={"Idempotency-Key": "hub-endpoint-refused"},
    )
    assert refused.status_code == 400
    assert refused.json()["error"]["param"] == "container.env.HF_ENDPOINT"


def test_a_finetune_names_a_model_in_the_organization_s_hub(
    api, compute_org, live_stack, tiny_model, demo_data
):
    files = {path.name: path.read_bytes() for path in tiny_model.iterdir() if path.is_file()}
    model = hub_repo_with_files(live_stack, compute_org, "tiny", files)
    project = ProjectFactory(organization=compute_org)

    response = api.session.post(
        f"{api.base}/api/v1/projects/{project.public_id}/finetunes",
        json={
            "name": "from-the-hub",
            "model": model,
            "dataset": str(demo_data["alpaca"]),
            "dataset_format": "alpaca",
            "max_steps": 4,
            "save_steps": 4,
        },
        headers={"Idempotency-Key": "from-the-hub"},
        timeout=10,
    )
    assert response.status_code == 201, response.text
    done = api.wait_state(response.json()["id"], TERMINAL, timeout=300)
    logs = [line["message"] for line in api.logs(done["id"])]
    assert done["state"] == "succeeded", "\n".join(logs[-30:])
    assert f"trainer: model {model} comes from this organization's hub" in logs
