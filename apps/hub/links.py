"""Addresses of the hub's repositories, as the Hugging Face client expects them: the
endpoint (this server's `/hf`, on the host the caller used), then `datasets/` for a dataset,
then `<namespace>/<name>`."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest

from apps.hub.models import HubRepo, RepoKind
from runner.protocol import HUB_PATH

HUB_PREFIX = HUB_PATH


def endpoint(request: HttpRequest) -> str:
    return request.build_absolute_uri(HUB_PREFIX)


def repo_path(repo: HubRepo) -> str:
    kind = "datasets/" if repo.kind == RepoKind.DATASET else ""
    return f"{kind}{repo.repo_id}"


def repo_url(request: HttpRequest, repo: HubRepo) -> str:
    return f"{endpoint(request)}/{repo_path(repo)}"


def commit_url(request: HttpRequest, repo: HubRepo, oid: str) -> str:
    return f"{repo_url(request, repo)}/commit/{oid}"


def public_endpoint(request: HttpRequest) -> str:
    """The HF_ENDPOINT to give people: under TRAINYARD_PUBLIC_URL when set, else this host."""
    base = settings.TRAINYARD_PUBLIC_URL or request.build_absolute_uri("/")
    return f"{base.rstrip('/')}{HUB_PREFIX}"
