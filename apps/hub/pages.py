"""The hub's pages: an organization's Models and Datasets, and one repository's files at a
revision, its commits, branches and tags, with a download link per file and the lines that
use it from code. Any member sees them (another organization's repository is a 404); files
download with the signed-in session, as the protocol's `resolve` with a key."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.views.decorators.http import require_GET

from apps.accounts.tenancy import membership_for_slug, remember_org
from apps.core.errors import ApiError
from apps.hub import repos
from apps.hub.downloads import file_response
from apps.hub.links import public_endpoint, repo_path
from apps.hub.models import HubCommit, HubRepo, RefKind, RepoKind
from apps.hub.names import DEFAULT_BRANCH

COMMITS_SHOWN = 20
KIND_OF_SECTION = {"models": RepoKind.MODEL, "datasets": RepoKind.DATASET}


def _kind(section: str) -> str:
    if section not in KIND_OF_SECTION:
        raise Http404("No such section.")
    return KIND_OF_SECTION[section]


@login_required
@require_GET
def repo_list(request: HttpRequest, org_slug: str, section: str) -> HttpResponse:
    membership = membership_for_slug(request.user, org_slug)
    org = membership.organization
    remember_org(request, org)
    kind = _kind(section)
    rows = []
    for repo in repos.repos_of(org, kind):
        head = repos.refs(repo).filter(kind=RefKind.BRANCH, name=DEFAULT_BRANCH).first()
        rows.append((repo, head.commit if head else None))
    context = {
        "org": org,
        "membership": membership,
        "section": section,
        "kind": kind,
        "rows": rows,
        "hub_endpoint": public_endpoint(request),
    }
    return TemplateResponse(request, "hub/list.html", context)


def _repo_at(request: HttpRequest, org_slug: str, section: str, name: str):
    membership = membership_for_slug(request.user, org_slug)
    try:
        repo = repos.find_repo(membership.organization, _kind(section), name)
    except ApiError as missing:
        raise Http404("No such repository.") from missing
    return membership, repo


def _revision(repo: HubRepo, wanted: str) -> HubCommit:
    try:
        return repos.resolve(repo, wanted)
    except ApiError as missing:
        raise Http404(f"No revision {wanted!r}.") from missing


@login_required
@require_GET
def repo_detail(request: HttpRequest, org_slug: str, section: str, name: str) -> HttpResponse:
    membership, repo = _repo_at(request, org_slug, section, name)
    remember_org(request, membership.organization)
    revision = request.GET.get("rev") or DEFAULT_BRANCH
    commit = _revision(repo, revision)
    files = list(repos.tree(commit))
    refs = list(repos.refs(repo))
    context = {
        "org": membership.organization,
        "membership": membership,
        "section": section,
        "repo": repo,
        "revision": revision,
        "commit": commit,
        "files": files,
        "total_bytes": sum(item.blob.size_bytes for item in files),
        "commits": list(repos.history(commit, limit=COMMITS_SHOWN)),
        "branches": [ref for ref in refs if ref.kind == RefKind.BRANCH],
        "tags": [ref for ref in refs if ref.kind == RefKind.TAG],
        "hub_endpoint": public_endpoint(request),
        "repo_type": "dataset" if repo.kind == RepoKind.DATASET else "model",
        "repo_path": repo_path(repo),
    }
    return TemplateResponse(request, "hub/repo.html", context)


@login_required
@require_GET
def file_download(
    request: HttpRequest, org_slug: str, section: str, name: str, revision: str, path: str
) -> HttpResponse:
    _, repo = _repo_at(request, org_slug, section, name)
    commit = _revision(repo, revision)
    try:
        item = repos.file_at(commit, path)
    except ApiError as missing:
        raise Http404("No such file.") from missing
    return file_response(request, item, commit.oid)
