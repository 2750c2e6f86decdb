"""Where `seed_demo` puts the demo fine-tune's base model and datasets (under var/), how it
publishes them to the demo organization's hub, what the fine-tune form is prefilled with,
and the credits it grants the demo organization."""

from __future__ import annotations

import hashlib
from pathlib import Path

from django.conf import settings
from django.db import transaction

from apps.accounts.models import Organization
from apps.billing import ledger
from apps.billing.models import Transfer
from apps.core.money import usd_to_micros
from apps.hub import blobs
from apps.hub import repos as hub_repos
from apps.hub.errors import RepoNotFound
from apps.hub.models import HubRepo, RepoKind
from apps.hub.names import DEFAULT_BRANCH

# Enough for many demo jobs at the local provider's prices; granted once per organization.
DEMO_CREDITS_USD = 100


def demo_model_dir() -> Path:
    return settings.VAR_DIR / "demo" / "tiny-llama"


def demo_datasets_dir() -> Path:
    return settings.VAR_DIR / "demo" / "datasets"


DEMO_MODEL_REPO = "tiny-llama"
DEMO_DATASET_FORMAT = "alpaca"


def demo_dataset_repo(dataset_format: str) -> str:
    return f"demo-{dataset_format}"


def demo_finetune_initial(organization: Organization) -> dict:
    """The fine-tune form prefilled with the demo model and dataset that `seed_demo`
    published to `organization`'s hub, so a newcomer's first fine-tune needs no typing and
    runs on any runtime (a container fetches them from the hub; no host path). Empty for
    an organization without them."""
    model = DEMO_MODEL_REPO
    dataset = demo_dataset_repo(DEMO_DATASET_FORMAT)
    held = set(
        HubRepo.objects.filter(organization=organization, name__in=(model, dataset)).values_list(
            "kind", "name"
        )
    )
    if held != {(RepoKind.MODEL, model), (RepoKind.DATASET, dataset)}:
        return {}
    return {
        "name": "demo-finetune",
        "model": f"{organization.slug}/{model}",
        "dataset": f"{organization.slug}/{dataset}",
        "dataset_format": DEMO_DATASET_FORMAT,
        "max_steps": 40,
    }


# A prompt in the shape of the demo data's rows (trainer.demo_data: reverse the letters).
DEMO_PROMPT = "Reverse the letters.\nc a f"


def is_demo_model(organization: Organization, base_model: str | None) -> bool:
    """Whether `base_model` is the tiny random demo model (`seed_demo`'s): as published to
    the organization's hub, at any revision, or as the directory it was built in."""
    if not base_model:
        return False
    repo_id = base_model.split("@", 1)[0]
    return repo_id == f"{organization.slug}/{DEMO_MODEL_REPO}" or base_model == str(
        demo_model_dir()
    )


def publish_demo_assets(organization: Organization, model_dir: Path, datasets: dict) -> list[str]:
    """Publish the tiny model as `<org>/tiny-llama` and each demo dataset as
    `<org>/demo-<format>` (`train.<suffix>`) in the organization's hub; the repository ids.
    Idempotent: a repository that already holds exactly these bytes gets no new commit."""
    published = [
        _publish_folder(
            organization,
            RepoKind.MODEL,
            DEMO_MODEL_REPO,
            {path.name: path for path in sorted(model_dir.iterdir()) if path.is_file()},
        )
    ]
    for dataset_format, path in sorted(datasets.items()):
        files = {f"train{Path(path).suffix}": Path(path)}
        published.append(
            _publish_folder(
                organization, RepoKind.DATASET, demo_dataset_repo(dataset_format), files
            )
        )
    return published


@transaction.atomic
def _publish_folder(organization: Organization, kind: str, name: str, files: dict) -> str:
    try:
        repo = hub_repos.find_repo(organization, kind, name)
    except RepoNotFound:
        repo = hub_repos.create_repo(organization, kind, name)
    head = hub_repos.resolve(repo, DEFAULT_BRANCH)
    held = {item.path: item.blob.sha256 for item in hub_repos.tree(head)}
    wanted = {
        path: hashlib.sha256(source.read_bytes()).hexdigest() for path, source in files.items()
    }
    if held != wanted:
        additions = {
            path: blobs.store_bytes(organization, source.read_bytes(), what="demo file")
            for path, source in files.items()
        }
        stale = tuple(path for path in held if path not in files)
        hub_repos.commit(
            repo,
            branch=DEFAULT_BRANCH,
            changes=hub_repos.Changes(additions=additions, deleted_files=stale),
            summary="Demo files (seed_demo)",
            author="trainyard",
        )
    return repo.repo_id


def grant_demo_credits(organization: Organization) -> Transfer:
    """Grant the demo organization its credits, once: every job places a hold at submit, so
    without them `make run`'s first job would be refused `insufficient_balance`. The key is
    fixed per organization, so running `seed_demo` again grants nothing more."""
    return ledger.grant(
        organization=organization,
        amount_micros=usd_to_micros(DEMO_CREDITS_USD),
        idempotency_key=f"seed-demo-grant:{organization.slug}",
        memo="demo credits (seed_demo)",
    )
