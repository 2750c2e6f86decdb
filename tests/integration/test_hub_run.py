"""Workloads and the hub: every job gets HF_ENDPOINT and an HF_TOKEN of its attempt, and the
stock Hugging Face client inside it reads its organization's repositories, nothing else,
and only while the attempt lasts. (In a container with a network of its own:
test_containers_run.py.)"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
import requests
from huggingface_hub import HfApi

from apps.accounts import services as account_services
from apps.jobs.execution.tokens import hub_token_for
from apps.jobs.models import Attempt, LogLine
from tests.factories import OrganizationFactory, ProjectFactory
from tests.integration.conftest import TERMINAL
from tests.integration.stack import wait_for

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


def hub_repo_with_files(
    stack, org, name: str, files: dict[str, bytes], *, kind: str = "model"
) -> str:
    _, key = account_services.api_key_create(organization=org, name=f"hub-{name}")
    auth = {"Authorization": f"Bearer {key}"}
    made = requests.post(
        f"{stack.url}/hf/api/repos/create", json={"name": name, "type": kind}, headers=auth
    )
    assert made.status_code == 200, made.text
    lines = [{"key": "header", "value": {"summary": "hello"}}]
    for path, data in files.items():
        content = base64.b64encode(data).decode()
        lines.append({"key": "file", "value": {"content": content, "path": path}})
    body = "\n".join(json.dumps(item) for item in lines)
    repo_id = f"{org.slug}/{name}"
    committed = requests.post(
        f"{stack.url}/hf/api/{kind}s/{repo_id}/commit/main",
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


def hub_model_and_data(stack, org, tiny_model, demo_data) -> tuple[str, str]:
    """The tiny model as `<org>/tiny` and the Alpaca demo rows as `<org>/greetings`
    (data/train.jsonl), pushed to the stack's hub, each tagged `v1`."""
    files = {path.name: path.read_bytes() for path in tiny_model.iterdir() if path.is_file()}
    model = hub_repo_with_files(stack, org, "tiny", files)
    rows = demo_data["alpaca"].read_bytes()
    data = hub_repo_with_files(stack, org, "greetings", {"data/train.jsonl": rows}, kind="dataset")
    hub = HfApi(endpoint=f"{stack.url}/hf", token=_key(org))
    hub.create_tag(model, tag="v1")
    hub.create_tag(data, tag="v1", repo_type="dataset")
    return model, data


def finetune_from_the_hub(
    api, org, model: str, data: str, *, name: str = "hub-tune", **extra
) -> dict:
    """Submit a four-step fine-tune of `model` on `data` (checkpoints at 2 and 4; `extra`
    fields besides) and wait for it to succeed; the job."""
    project = ProjectFactory(organization=org)
    response = api.session.post(
        f"{api.base}/api/v1/projects/{project.public_id}/finetunes",
        json={
            "name": name,
            "model": model,
            "dataset": data,
            "dataset_format": "alpaca",
            "max_steps": 4,
            "save_steps": 2,
            **extra,
        },
        headers={"Idempotency-Key": f"finetune-{name}"},
        timeout=10,
    )
    assert response.status_code == 201, response.text
    done = api.wait_state(response.json()["id"], TERMINAL, timeout=300)
    logs = [line["message"] for line in api.logs(done["id"])]
    assert done["state"] == "succeeded", "\n".join(logs[-30:])
    return done


def test_a_finetune_of_hub_repos_at_revisions_is_published_back_to_the_hub(
    api, compute_org, live_stack, tiny_model, demo_data, tmp_path
):
    """Model and data from the organization's hub, each at a revision; the adapter comes back
    as a model repository the stock client reads, each checkpoint a tag."""
    model, data = hub_model_and_data(live_stack, compute_org, tiny_model, demo_data)
    hub = HfApi(endpoint=f"{live_stack.url}/hf", token=_key(compute_org))

    done = finetune_from_the_hub(
        api, compute_org, f"{model}@v1", f"{data}@v1", name="greeter from the hub", merge=True
    )

    logs = [line["message"] for line in api.logs(done["id"])]
    assert f"trainer: model {model}@v1 comes from this organization's hub" in logs
    repo_id = published_repo(api, done["id"])
    assert repo_id == f"{compute_org.slug}/greeter-from-the-hub"
    refs = hub.list_repo_refs(repo_id)
    assert sorted(tag.name for tag in refs.tags) == ["final", "step-2", "step-4"]
    folder = Path(hub.snapshot_download(repo_id, revision="final", cache_dir=str(tmp_path)))
    assert (folder / "adapter_model.safetensors").stat().st_size > 0
    card = (folder / "README.md").read_text()
    assert f"base_model: {compute_org.slug}/tiny" in card
    assert f"- {data}" in card
    assert "| Held-out loss |" in card and "not measured" not in card
    info = hub.model_info(repo_id)
    assert info.card_data["library_name"] == "peft"
    # Asked to merge: the base with the adapter merged in, loadable as a plain model.
    assert 'subfolder="merged"' in card
    from transformers import AutoModelForCausalLM

    merged = AutoModelForCausalLM.from_pretrained(folder / "merged")
    assert merged.config.model_type == "llama"
    assert not hasattr(merged, "peft_config")


def published_repo(api, job_id: str) -> str:
    """The repository the job's adapter was published as, once it is."""
    published = wait_for(
        lambda: next((e for e in api.events(job_id) if e["type"] == "published_to_hub"), None),
        timeout=60,
        what="the adapter published to the hub",
    )
    return published["data"]["repo_id"]


def _key(org) -> str:
    """A new key of `org` each call (an organization's active keys have distinct names)."""
    name = f"hub-reader-{org.api_keys.count() + 1}"
    return account_services.api_key_create(organization=org, name=name)[1]


def test_the_host_runtime_gives_the_organization_s_cache_unless_the_job_names_its_own(
    api, compute_org
):
    show = [
        "sh",
        "-c",
        'echo "cache=${HF_HUB_CACHE:-none}"; test -w "${HF_HUB_CACHE:-/}"; echo w=$?',
    ]
    plain = api.submit(command=show)
    own = api.submit(command=show, env={"HF_HOME": "hf-home"})
    for job in (plain, own):
        assert api.wait_state(job["id"], TERMINAL, timeout=60)["state"] == "succeeded"

    cache = _user_lines(plain["id"])[0].removeprefix("cache=")
    assert cache.endswith(f"/.hub-cache/org-{compute_org.pk}")
    assert _user_lines(plain["id"])[1] == "w=0"  # the workload's user may write there
    assert _user_lines(own["id"])[0] == "cache=none"  # HF_HOME named: the job's own cache
