"""The hub against the stock Hugging Face client, on the real server: `huggingface_hub` and
transformers as pip installs them, in a process of their own configured only by HF_ENDPOINT
and HF_TOKEN (a Trainyard API key), as a user's script or a workload would be."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from apps.accounts import services as account_services
from apps.accounts.models import Role
from apps.hub.models import HubRepo
from tests.factories import OrganizationFactory
from tests.live import base_env

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

TWELVE_MB = 12 * 1024 * 1024


def run_client(stack, token: str | None, home: Path, code: str, timeout: float = 180) -> dict:
    """Run `code` (which prints one JSON line last) with only HF_ENDPOINT and HF_TOKEN set
    for the hub; the JSON it printed."""
    env = base_env(HF_ENDPOINT=f"{stack.url}/hf", HF_HOME=str(home / "hf-home"))
    for name in ("HF_TOKEN", "HF_HUB_OFFLINE", "HF_HUB_DISABLE_XET", "TRANSFORMERS_OFFLINE"):
        env.pop(name, None)
    if token:
        env["HF_TOKEN"] = token
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        cwd=home,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}\n{stack.logs()}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def digests(folder: Path) -> dict[str, str]:
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and ".cache" not in path.parts
    }


@pytest.fixture
def org():
    return OrganizationFactory(slug="hub-org")


def key_for(org, role: str = Role.MEMBER) -> str:
    return account_services.api_key_create(organization=org, name=f"hub-{role}", role=role)[1]


def test_the_stock_client_pushes_a_model_and_transformers_loads_it(
    stack, org, tiny_model, tmp_path
):
    model = tmp_path / "model"
    model.mkdir()
    for path in tiny_model.iterdir():
        if path.is_file():
            (model / path.name).write_bytes(path.read_bytes())
    (model / "weights" / "extra").mkdir(parents=True)
    (model / "weights" / "extra" / "big.bin").write_bytes(os.urandom(TWELVE_MB))
    (model / "README.md").write_text("---\nlicense: mit\n---\n# tiny\n")
    key = key_for(org)

    pushed = run_client(
        stack,
        key,
        tmp_path,
        f"""
        import json
        from huggingface_hub import HfApi
        api = HfApi()
        url = api.create_repo("hub-org/tiny")
        again = api.create_repo("hub-org/tiny", exist_ok=True)
        first = api.upload_folder(folder_path={str(model)!r}, repo_id="hub-org/tiny",
                                  commit_message="the tiny model")
        api.create_tag("hub-org/tiny", tag="v1")
        api.create_branch("hub-org/tiny", branch="experiment")
        second = api.upload_file(path_or_fileobj=b"changed\\n", path_in_repo="README.md",
                                 repo_id="hub-org/tiny", commit_message="a new card")
        info = api.model_info("hub-org/tiny")
        tagged = api.model_info("hub-org/tiny", revision="v1")
        refs = api.list_repo_refs("hub-org/tiny")
        commits = api.list_repo_commits("hub-org/tiny")
        files = api.list_repo_files("hub-org/tiny")
        print(json.dumps({{
            "url": str(url), "again": str(again), "repo_id": url.repo_id,
            "first": first.oid, "second": second.oid,
            "info_sha": info.sha, "tagged_sha": tagged.sha,
            "siblings": sorted(s.rfilename for s in info.siblings),
            "branches": sorted((b.name, b.target_commit) for b in refs.branches),
            "tags": [(t.name, t.target_commit) for t in refs.tags],
            "titles": [c.title for c in commits],
            "files": sorted(files),
        }}))
        """,
    )
    assert pushed["repo_id"] == "hub-org/tiny"
    assert pushed["url"] == pushed["again"] == f"{stack.url}/hf/hub-org/tiny"
    assert pushed["info_sha"] == pushed["second"] != pushed["first"]
    assert pushed["tagged_sha"] == pushed["first"]
    assert ["experiment", pushed["first"]] in pushed["branches"]
    assert ["main", pushed["second"]] in pushed["branches"]
    assert pushed["tags"] == [["v1", pushed["first"]]]
    assert pushed["titles"] == ["a new card", "the tiny model", "initial commit"]
    assert pushed["files"] == pushed["siblings"] == sorted(digests(model))
    repo = HubRepo.objects.get(organization=org, name="tiny")
    assert repo.commits.count() == 3

    pulled = run_client(
        stack,
        key,
        tmp_path,
        """
        import json
        from huggingface_hub import hf_hub_download, snapshot_download
        old = hf_hub_download("hub-org/tiny", "README.md", revision="v1")
        new = hf_hub_download("hub-org/tiny", "README.md")
        snapshot = snapshot_download("hub-org/tiny", revision="v1")
        print(json.dumps({"old": open(old).read(), "new": open(new).read(),
                          "snapshot": snapshot}))
        """,
    )
    assert pulled["old"].startswith("---\nlicense: mit")
    assert pulled["new"] == "changed\n"
    assert digests(Path(pulled["snapshot"])) == digests(model)

    loaded = run_client(
        stack,
        key,
        tmp_path,
        """
        import json
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
        tokenizer = AutoTokenizer.from_pretrained("hub-org/tiny")
        model = AutoModelForCausalLM.from_pretrained("hub-org/tiny")
        ids = tokenizer("hello hub", return_tensors="pt").input_ids
        with torch.no_grad():
            logits = model(ids).logits
        print(json.dumps({"shape": list(logits.shape), "vocab": model.config.vocab_size}))
        """,
    )
    assert loaded["shape"][-1] == loaded["vocab"]


def test_keys_of_other_organizations_and_viewers_get_what_their_role_allows(stack, org, tmp_path):
    member = key_for(org)
    viewer = key_for(org, Role.VIEWER)
    stranger = key_for(OrganizationFactory(slug="other-org"))
    (tmp_path / "weights.bin").write_bytes(b"\x00" * 1000)
    run_client(
        stack,
        member,
        tmp_path,
        f"""
        import json
        from huggingface_hub import HfApi
        api = HfApi()
        api.create_repo("hub-org/private", repo_type="dataset")
        api.upload_file(path_or_fileobj={str(tmp_path / "weights.bin")!r},
                        path_in_repo="data/train.bin", repo_id="hub-org/private",
                        repo_type="dataset")
        print(json.dumps({{}}))
        """,
    )
    probe = """
        import json
        from huggingface_hub import HfApi, hf_hub_download
        from huggingface_hub.errors import (
            HfHubHTTPError, RepositoryNotFoundError, RemoteEntryNotFoundError,
            RevisionNotFoundError,
        )
        api = HfApi()
        said = {}
        def attempt(name, call):
            try:
                call()
                said[name] = "ok"
            except RepositoryNotFoundError:
                said[name] = "repo_not_found"
            except RevisionNotFoundError:
                said[name] = "revision_not_found"
            except RemoteEntryNotFoundError:
                said[name] = "entry_not_found"
            except HfHubHTTPError as err:
                said[name] = err.response.status_code
        attempt("info", lambda: api.dataset_info("hub-org/private"))
        attempt("download", lambda: hf_hub_download(
            "hub-org/private", "data/train.bin", repo_type="dataset"))
        attempt("missing_file", lambda: hf_hub_download(
            "hub-org/private", "data/nope.bin", repo_type="dataset"))
        attempt("missing_revision", lambda: hf_hub_download(
            "hub-org/private", "data/train.bin", repo_type="dataset", revision="nope"))
        attempt("push", lambda: api.upload_file(
            path_or_fileobj=b"x", path_in_repo="x.txt", repo_id="hub-org/private",
            repo_type="dataset"))
        attempt("create", lambda: api.create_repo("hub-org/another"))
        attempt("delete", lambda: api.delete_repo("hub-org/private", repo_type="dataset"))
        print(json.dumps(said))
    """
    answers = {}
    for who, token in (("viewer", viewer), ("stranger", stranger), ("anonymous", None)):
        (tmp_path / who).mkdir()
        answers[who] = run_client(stack, token, tmp_path / who, probe)
    as_viewer, as_stranger, anonymous = (answers[w] for w in ("viewer", "stranger", "anonymous"))

    assert as_viewer == {
        "info": "ok",
        "download": "ok",
        "missing_file": "entry_not_found",
        "missing_revision": "revision_not_found",
        "push": 403,
        "create": 403,
        "delete": 403,
    }
    not_there = {name: "repo_not_found" for name in as_viewer}
    assert as_stranger == not_there | {"create": "repo_not_found"}
    assert anonymous == not_there
    assert HubRepo.objects.filter(organization=org).count() == 1
    assert not HubRepo.objects.filter(name="another").exists()
