"""The hub's JSON endpoints under `/hf/api/`, as the Hugging Face client calls them.

Paths, fields and status codes follow the client (`huggingface_hub`): repository info
(`/api/models/<ns>/<name>[/revision/<rev>]`), tree listings, paths-info, refs and commits,
`repos/create` and `repos/delete`, branches and tags, `preupload` and `commit`.

Uploads: the client asks `preupload` how to send each file. Since `hf_xet` is installed with
the client, a file answered "lfs" would go through Xet storage, which Trainyard does not
speak; every file is answered "regular", so its bytes come inline in the commit (base64),
and a file that is unchanged (its git blob id equals the one stored at that path) is not
sent at all: the answer carries the stored blob's id, and the client skips it.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from django.db import transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_http_methods

from apps.accounts.tenancy import Caller
from apps.core.errors import InvalidRequest, NotFound
from apps.hub import repos
from apps.hub.access import (
    hub_caller,
    hub_view,
    namespace_of,
    repo_for,
    require_caller,
    require_writer,
)
from apps.hub.blobs import check_file_size, find_blob, store_blob, touch
from apps.hub.card import card_data
from apps.hub.commit_body import read_commit
from apps.hub.errors import EntryNotFound, RevisionNotFound
from apps.hub.links import commit_url, repo_url
from apps.hub.models import HubCommit, HubFile, HubRepo, RefKind, RepoKind
from apps.hub.names import DEFAULT_BRANCH, check_path

PAGE_SIZE = 1000
KINDS = {"models": RepoKind.MODEL, "datasets": RepoKind.DATASET}


def _iso(value) -> str:
    return value.isoformat().replace("+00:00", "Z")


def _json_body(request: HttpRequest) -> dict:
    try:
        body = json.loads(request.body or b"{}")
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidRequest(f"The body is not JSON: {exc}.") from exc
    if not isinstance(body, dict):
        raise InvalidRequest("The body is a JSON object.")
    return body


def file_entry(item: HubFile) -> dict[str, Any]:
    return {
        "type": "file",
        "oid": item.blob.git_oid,
        "size": item.blob.size_bytes,
        "path": item.path,
    }


def folder_entry(commit: HubCommit, path: str) -> dict[str, Any]:
    oid = hashlib.sha1(f"{commit.oid}:{path}".encode(), usedforsecurity=False).hexdigest()
    return {"type": "directory", "oid": oid, "size": 0, "path": path}


def repo_info_json(repo: HubRepo, commit: HubCommit) -> dict[str, Any]:
    files = list(repos.tree(commit))
    info: dict[str, Any] = {
        "_id": f"{repo.kind}-{repo.pk}",
        "id": repo.repo_id,
        "author": repo.organization.slug,
        "sha": commit.oid,
        "lastModified": _iso(commit.created_at),
        "createdAt": _iso(repo.created_at),
        "private": True,
        "gated": False,
        "disabled": False,
        "downloads": 0,
        "likes": 0,
        "tags": [],
        "siblings": [
            {"rfilename": item.path, "size": item.blob.size_bytes, "blobId": item.blob.git_oid}
            for item in files
        ],
        "usedStorage": sum(item.blob.size_bytes for item in files),
    }
    if repo.kind == RepoKind.MODEL:
        info["modelId"] = repo.repo_id
    card = card_data(files)
    if card is not None:
        info["cardData"] = card
        tags = card.get("tags")
        if isinstance(tags, list):
            info["tags"] = [str(tag) for tag in tags]
        if isinstance(card.get("library_name"), str):
            info["library_name"] = card["library_name"]
    return info


@hub_view
@require_http_methods(["GET"])
def whoami(request: HttpRequest) -> HttpResponse:
    caller = hub_caller(request)
    if caller is None:
        return JsonResponse({"error": "Invalid username or password."}, status=401)
    org = caller.organization
    key = caller.api_key
    return JsonResponse(
        {
            "type": "user",
            "id": f"org-{org.pk}",
            "name": org.slug,
            "fullname": org.name,
            "orgs": [{"type": "org", "name": org.slug, "fullname": org.name}],
            "auth": {
                "type": "access_token",
                "accessToken": {
                    "displayName": key.name if key else "",
                    "role": "write" if caller.can("member") else "read",
                },
            },
        }
    )


def _kind_from_body(body: dict) -> str:
    kind = body.get("type") or RepoKind.MODEL
    if kind not in RepoKind.values:
        raise InvalidRequest(
            f"Trainyard's hub keeps model and dataset repositories, not {kind!r}.", param="type"
        )
    return kind


@hub_view
@require_http_methods(["POST"])
def create_repo(request: HttpRequest) -> HttpResponse:
    caller = require_caller(request)
    body = _json_body(request)
    organization = namespace_of(caller, body.get("organization"))
    require_writer(caller)
    kind = _kind_from_body(body)
    name = body.get("name")
    existing = (
        HubRepo.objects.filter(organization=organization, kind=kind, name=name).first()
        if isinstance(name, str)
        else None
    )
    if existing is not None:
        # The client reads the repository's url from a 409 as well (create_repo exist_ok).
        return JsonResponse(
            {"error": "You already created this repository.", "url": repo_url(request, existing)},
            status=409,
        )
    repo = repos.create_repo(organization, kind, name, user=caller.user, api_key=caller.api_key)
    return JsonResponse(
        {"url": repo_url(request, repo), "name": repo.repo_id, "id": repo.repo_id}, status=200
    )


@hub_view
@require_http_methods(["DELETE"])
def delete_repo(request: HttpRequest) -> HttpResponse:
    caller = require_caller(request)
    body = _json_body(request)
    organization = namespace_of(caller, body.get("organization"))
    repo = repos.find_repo(organization, _kind_from_body(body), str(body.get("name")))
    require_writer(caller)
    repos.delete_repo(repo)
    return HttpResponse(status=200)


def _repo(request: HttpRequest, kinds: str, namespace: str, name: str) -> tuple[Caller, HubRepo]:
    caller = require_caller(request)
    return caller, repo_for(caller, KINDS[kinds], namespace, name)


@hub_view
@require_http_methods(["GET"])
def repo_info(
    request: HttpRequest, kinds: str, namespace: str, name: str, revision: str = DEFAULT_BRANCH
) -> HttpResponse:
    _, repo = _repo(request, kinds, namespace, name)
    return JsonResponse(repo_info_json(repo, repos.resolve(repo, revision)))


def _paged(request: HttpRequest, items: list, render) -> HttpResponse:
    """One page of `items` with a Link header to the next (the client follows it)."""
    try:
        start = max(0, int(request.GET.get("cursor", "0")))
    except ValueError as exc:
        raise InvalidRequest("cursor is a number.", param="cursor") from exc
    page = items[start : start + PAGE_SIZE]
    answer = JsonResponse([render(item) for item in page], safe=False)
    if start + PAGE_SIZE < len(items):
        following = request.GET.copy()
        following["cursor"] = str(start + PAGE_SIZE)
        url = request.build_absolute_uri(f"{request.path}?{following.urlencode()}")
        answer["Link"] = f'<{url}>; rel="next"'
    return answer


def _flag(value: str | None) -> bool:
    return str(value).lower() in ("1", "true", "yes")


@hub_view
@require_http_methods(["GET"])
def tree(
    request: HttpRequest, kinds: str, namespace: str, name: str, revision: str, path: str = ""
) -> HttpResponse:
    _, repo = _repo(request, kinds, namespace, name)
    commit = repos.resolve(repo, revision)
    folder = path.strip("/")
    if folder:
        check_path(folder)
    files = list(repos.tree(commit))
    entries = repos.paths_under(files, folder, _flag(request.GET.get("recursive")))
    if folder and not entries:
        raise EntryNotFound(f"{folder} does not exist at {commit.oid}.")

    def render(entry: dict) -> dict:
        if entry["type"] == "file":
            return file_entry(entry["file"])
        return folder_entry(commit, entry["path"])

    return _paged(request, entries, render)


@hub_view
@require_http_methods(["POST"])
def paths_info(
    request: HttpRequest, kinds: str, namespace: str, name: str, revision: str
) -> HttpResponse:
    _, repo = _repo(request, kinds, namespace, name)
    commit = repos.resolve(repo, revision)
    wanted = request.POST.getlist("paths") or _json_body(request).get("paths") or []
    files = {item.path: item for item in repos.tree(commit)}
    folders = set()
    for path in files:
        parts = path.split("/")
        folders.update("/".join(parts[:depth]) for depth in range(1, len(parts)))
    found = []
    for path in dict.fromkeys(str(p).strip("/") for p in wanted):
        if path in files:
            found.append(file_entry(files[path]))
        elif path in folders:
            found.append(folder_entry(commit, path))
    return JsonResponse(found, safe=False)


@hub_view
@require_http_methods(["GET"])
def list_refs(request: HttpRequest, kinds: str, namespace: str, name: str) -> HttpResponse:
    _, repo = _repo(request, kinds, namespace, name)
    answer: dict[str, list] = {"branches": [], "converts": [], "tags": [], "pullRequests": []}
    for ref in repos.refs(repo):
        prefix = "refs/heads/" if ref.kind == RefKind.BRANCH else "refs/tags/"
        entry = {"name": ref.name, "ref": prefix + ref.name, "targetCommit": ref.commit.oid}
        answer["branches" if ref.kind == RefKind.BRANCH else "tags"].append(entry)
    return JsonResponse(answer)


@hub_view
@require_http_methods(["GET"])
def list_commits(
    request: HttpRequest, kinds: str, namespace: str, name: str, revision: str
) -> HttpResponse:
    _, repo = _repo(request, kinds, namespace, name)
    commits = list(repos.history(repos.resolve(repo, revision)))

    def render(item: HubCommit) -> dict:
        return {
            "id": item.oid,
            "title": item.summary,
            "message": item.description,
            "authors": [{"user": item.author}] if item.author else [],
            "date": _iso(item.created_at),
        }

    return _paged(request, commits, render)


@hub_view
@require_http_methods(["POST", "DELETE"])
def branch(
    request: HttpRequest, kinds: str, namespace: str, name: str, branch: str
) -> HttpResponse:
    caller, repo = _repo(request, kinds, namespace, name)
    require_writer(caller)
    if request.method == "DELETE":
        repos.delete_ref(repo, RefKind.BRANCH, branch)
        return HttpResponse(status=200)
    body = _json_body(request)
    start = repos.resolve(repo, str(body.get("startingPoint") or DEFAULT_BRANCH))
    repos.create_ref(repo, RefKind.BRANCH, branch, start)
    return HttpResponse(status=200)


@hub_view
@require_http_methods(["POST", "DELETE"])
def tag(request: HttpRequest, kinds: str, namespace: str, name: str, revision: str) -> HttpResponse:
    """POST tags the commit `revision` names with `{"tag": name}`; DELETE removes the tag
    named in the path (the client puts the tag there for a delete)."""
    caller, repo = _repo(request, kinds, namespace, name)
    require_writer(caller)
    if request.method == "DELETE":
        repos.delete_ref(repo, RefKind.TAG, revision)
        return HttpResponse(status=200)
    body = _json_body(request)
    repos.create_ref(repo, RefKind.TAG, str(body.get("tag", "")), repos.resolve(repo, revision))
    return HttpResponse(status=200)


def _branch_to_write(repo: HubRepo, revision: str, request: HttpRequest) -> HubCommit:
    if _flag(request.GET.get("create_pr")):
        raise InvalidRequest("Trainyard's hub has no pull requests.", param="create_pr")
    head = repos.refs(repo).filter(kind=RefKind.BRANCH, name=revision).first()
    if head is None:
        raise RevisionNotFound(f"Commits go to a branch; {revision!r} is not one.")
    return head.commit


@hub_view
@require_http_methods(["POST"])
def preupload(
    request: HttpRequest, kinds: str, namespace: str, name: str, revision: str
) -> HttpResponse:
    caller, repo = _repo(request, kinds, namespace, name)
    require_writer(caller)
    head = _branch_to_write(repo, revision, request)
    files = _json_body(request).get("files")
    if not isinstance(files, list):
        raise InvalidRequest('The body lists "files".', param="files")
    stored = {item.path: item.blob.git_oid for item in repos.tree(head)}
    answer = []
    for item in files:
        if not isinstance(item, dict):
            raise InvalidRequest("Each file is an object with a path.", param="files")
        path = check_path(item.get("path"))
        size = item.get("size")
        if isinstance(size, int):
            check_file_size(size, path)
        answer.append(
            {"path": path, "uploadMode": "regular", "shouldIgnore": False, "oid": stored.get(path)}
        )
    return JsonResponse({"files": answer, "commitOid": head.oid})


@hub_view
@require_http_methods(["POST"])
def commit(
    request: HttpRequest, kinds: str, namespace: str, name: str, revision: str
) -> HttpResponse:
    caller, repo = _repo(request, kinds, namespace, name)
    require_writer(caller)
    _branch_to_write(repo, revision, request)
    body = read_commit(request)
    try:
        additions = {}
        for item in body.inline:
            additions[item.path] = store_blob(
                repo.organization, item.content, sha256=item.sha256, size=item.size
            )
        for item in body.stored:
            blob = find_blob(repo.organization, item.sha256)
            if blob is None:
                raise InvalidRequest(
                    f"{item.path} names content ({item.sha256}) this organization has not "
                    "uploaded; send it inline.",
                    param=item.path,
                )
            touch(blob)
            additions[item.path] = blob
    finally:
        body.close()
    with transaction.atomic():
        made = repos.commit(
            repo,
            branch=revision,
            changes=repos.Changes(
                additions=additions,
                deleted_files=tuple(body.deleted_files),
                deleted_folders=tuple(body.deleted_folders),
            ),
            summary=body.summary,
            description=body.description,
            author=repos.author_name(caller.user, caller.api_key),
            parent_oid=body.parent_commit,
        )
    return JsonResponse(
        {
            "success": True,
            "commitOid": made.oid,
            "commitUrl": commit_url(request, repo, made.oid),
            "commitMessage": made.summary,
            "hookOutput": "",
            "pullRequestUrl": None,
        }
    )


@hub_view
@require_http_methods(["POST"])
def validate_yaml(request: HttpRequest) -> HttpResponse:
    """The client checks a README's metadata here before committing it. Trainyard keeps
    metadata as written, so there is nothing to refuse."""
    require_caller(request)
    return JsonResponse({"errors": [], "warnings": []})


@hub_view
def not_found(request: HttpRequest, rest: str = "") -> HttpResponse:
    raise NotFound(f"Nothing is served at {request.path}.")
