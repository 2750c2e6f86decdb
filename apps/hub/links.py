"""Addresses of the hub's repositories, as the Hugging Face client expects them: the
endpoint (this server's `/hf`, on the host the caller used), then `datasets/` for a dataset,
then `<namespace>/<name>`."""

from __future__ import annotations

from django.http import HttpRequest

from apps.hub.models import HubRepo, RepoKind

HUB_PREFIX = "/hf"


def endpoint(request: HttpRequest) -> str:
    return request.build_absolute_uri(HUB_PREFIX)


def repo_path(repo: HubRepo) -> str:
    kind = "datasets/" if repo.kind == RepoKind.DATASET else ""
    return f"{kind}{repo.repo_id}"


def repo_url(request: HttpRequest, repo: HubRepo) -> str:
    return f"{endpoint(request)}/{repo_path(repo)}"


def commit_url(request: HttpRequest, repo: HubRepo, oid: str) -> str:
    return f"{repo_url(request, repo)}/commit/{oid}"
