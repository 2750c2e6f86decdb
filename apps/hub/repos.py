"""Hub repositories: creating and deleting them, resolving a revision, reading a tree, and
writing commits, branches and tags.

Every lookup is inside one organization: a repository of another organization is not found
(`RepoNotFound`), exactly as one that does not exist. A revision is a branch, a tag or a
commit id of the repository (40 hex digits). A commit copies its parent's tree rows and
applies the changes; it moves its branch under a row lock, so two commits to one branch are
applied one after the other, and a commit that names a parent other than the branch's head
is refused (`ParentMismatch`) instead of silently undoing the other.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from django.db import IntegrityError, transaction
from django.db.models import ProtectedError, QuerySet
from django.utils import timezone

from apps.accounts.models import ApiKey, Organization, User
from apps.core.errors import InvalidRequest
from apps.hub.errors import (
    EntryNotFound,
    ParentMismatch,
    RefExists,
    RepoExists,
    RepoInUse,
    RepoNotFound,
    RevisionNotFound,
)
from apps.hub.models import HubBlob, HubCommit, HubFile, HubRef, HubRepo, RefKind, RepoKind
from apps.hub.names import COMMIT_OID_RE, DEFAULT_BRANCH, check_ref_name, check_repo_name

INITIAL_COMMIT_SUMMARY = "initial commit"


def find_repo(organization: Organization, kind: str, name: str) -> HubRepo:
    repo = (
        HubRepo.objects.select_related("organization")
        .filter(organization=organization, kind=kind, name=name)
        .first()
    )
    if repo is None:
        raise RepoNotFound()
    return repo


def repos_of(organization: Organization, kind: str | None = None) -> QuerySet[HubRepo]:
    repos = HubRepo.objects.select_related("organization").filter(organization=organization)
    return repos.filter(kind=kind) if kind else repos


def _new_oid(*parts: object) -> str:
    """A commit id: 40 hex digits, unique by the random salt among what it hashes."""
    text = "\n".join(str(part) for part in (*parts, secrets.token_hex(16)))
    return hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()


@transaction.atomic
def create_repo(
    organization: Organization,
    kind: str,
    name: str,
    *,
    user: User | None = None,
    api_key: ApiKey | None = None,
) -> HubRepo:
    """A new repository with an empty first commit on `main`. Raises RepoExists."""
    check_repo_name(name)
    if kind not in RepoKind.values:
        raise RepoNotFound(f"There is no repository type {kind!r}.")
    try:
        with transaction.atomic():
            repo = HubRepo.objects.create(
                organization=organization,
                kind=kind,
                name=name,
                created_by=user,
                created_by_key=api_key,
            )
    except IntegrityError as exc:
        raise RepoExists(f"{organization.slug}/{name} exists already.") from exc
    first = HubCommit.objects.create(
        repo=repo,
        oid=_new_oid(repo.pk, INITIAL_COMMIT_SUMMARY),
        summary=INITIAL_COMMIT_SUMMARY,
        author=author_name(user, api_key),
    )
    HubRef.objects.create(repo=repo, kind=RefKind.BRANCH, name=DEFAULT_BRANCH, commit=first)
    return repo


def delete_repo(repo: HubRepo) -> None:
    """Delete the repository, its history and refs. Its blobs stay with the organization
    (another repository or commit may hold the same bytes) until garbage collection finds
    no commit naming them (apps.hub.gc). Raises RepoInUse when an endpoint serves one of its
    commits."""
    try:
        with transaction.atomic():
            repo.delete()
    except ProtectedError as exc:
        raise RepoInUse(
            f"{repo.repo_id} cannot be deleted: an endpoint serves one of its commits. Point "
            "the endpoint elsewhere or stop it first."
        ) from exc


def author_name(user: User | None, api_key: ApiKey | None) -> str:
    if user is not None:
        return user.get_username()
    if api_key is not None:
        return f"api key {api_key.name}"
    return ""


def resolve(repo: HubRepo, revision: str) -> HubCommit:
    """The commit `revision` names: a commit id of this repository, a branch, or a tag."""
    if COMMIT_OID_RE.fullmatch(revision):
        commit = HubCommit.objects.filter(repo=repo, oid=revision).first()
        if commit is not None:
            return commit
    for kind in (RefKind.BRANCH, RefKind.TAG):
        ref = HubRef.objects.select_related("commit").filter(repo=repo, kind=kind, name=revision)
        found = ref.first()
        if found is not None:
            return found.commit
    raise RevisionNotFound(f"Invalid rev id: {revision}")


def tree(commit: HubCommit) -> QuerySet[HubFile]:
    """The commit's files, by path, with their blobs."""
    return HubFile.objects.select_related("blob").filter(commit=commit).order_by("path")


def file_at(commit: HubCommit, path: str) -> HubFile:
    found = tree(commit).filter(path=path).first()
    if found is None:
        raise EntryNotFound(f"{path} does not exist at {commit.oid}.")
    return found


def history(commit: HubCommit, limit: int | None = None) -> Iterator[HubCommit]:
    """The commit and its ancestors, newest first."""
    current: HubCommit | None = commit
    count = 0
    while current is not None and (limit is None or count < limit):
        yield current
        count += 1
        current = (
            HubCommit.objects.filter(pk=current.parent_id).first() if current.parent_id else None
        )


def refs(repo: HubRepo) -> QuerySet[HubRef]:
    return HubRef.objects.select_related("commit").filter(repo=repo)


@dataclass(frozen=True)
class Changes:
    """What a commit does to its parent's tree. Additions map a path to its blob."""

    additions: dict[str, HubBlob]
    deleted_files: tuple[str, ...] = ()
    deleted_folders: tuple[str, ...] = ()


def _apply(parent_files: dict[str, int], changes: Changes) -> dict[str, int]:
    files = dict(parent_files)
    for path in changes.deleted_files:
        if path not in files:
            raise EntryNotFound(f"Cannot delete {path}: it does not exist.")
        del files[path]
    for folder in changes.deleted_folders:
        prefix = folder.rstrip("/") + "/"
        doomed = [path for path in files if path.startswith(prefix)]
        if not doomed:
            raise EntryNotFound(f"Cannot delete folder {folder}: it does not exist.")
        for path in doomed:
            del files[path]
    for path, blob in changes.additions.items():
        files[path] = blob.pk
    _check_no_file_folder_clash(files)
    return files


def _check_no_file_folder_clash(files: dict[str, int]) -> None:
    folders = {path.rsplit("/", 1)[0] for path in files if "/" in path}
    parents = set()
    for folder in folders:
        parts = folder.split("/")
        parents.update("/".join(parts[: i + 1]) for i in range(len(parts)))
    clash = sorted(parents & files.keys())
    if clash:
        raise InvalidRequest(f"{clash[0]} cannot be both a file and a folder.", param="path")


def commit(
    repo: HubRepo,
    *,
    branch: str,
    changes: Changes,
    summary: str,
    description: str = "",
    author: str = "",
    parent_oid: str | None = None,
) -> HubCommit:
    """Commit `changes` on top of `branch`'s head and move the branch. Raises
    RevisionNotFound (no such branch) and ParentMismatch (the head is not `parent_oid`)."""
    with transaction.atomic():
        ref = (
            HubRef.objects.select_for_update()
            .select_related("commit")
            .filter(repo=repo, kind=RefKind.BRANCH, name=branch)
            .first()
        )
        if ref is None:
            raise RevisionNotFound(f"There is no branch {branch!r} to commit to.")
        parent = ref.commit
        if parent_oid is not None and parent_oid != parent.oid:
            raise ParentMismatch(
                f"The branch {branch} is at {parent.oid}, not at the parent commit "
                f"{parent_oid} this commit was made on."
            )
        parent_files = dict(HubFile.objects.filter(commit=parent).values_list("path", "blob_id"))
        files = _apply(parent_files, changes)
        new = HubCommit.objects.create(
            repo=repo,
            oid=_new_oid(repo.pk, parent.oid, sorted(files.items()), summary),
            parent=parent,
            summary=summary[:500],
            description=description,
            author=author[:200],
        )
        HubFile.objects.bulk_create(
            [HubFile(commit=new, path=path, blob_id=blob) for path, blob in files.items()],
            batch_size=1000,
        )
        now = timezone.now()
        HubRef.objects.filter(pk=ref.pk).update(commit=new, updated_at=now)
        HubRepo.objects.filter(pk=repo.pk).update(updated_at=now)
    return new


def create_ref(
    repo: HubRepo, kind: str, name: str, at: HubCommit, *, exist_ok: bool = False
) -> HubRef:
    """A new branch or tag at commit `at`. Raises RefExists unless `exist_ok` (a branch or tag
    of that name is then left where it is)."""
    check_ref_name(name, param="branch" if kind == RefKind.BRANCH else "tag")
    existing = HubRef.objects.filter(repo=repo, kind=kind, name=name).first()
    if existing is not None:
        if exist_ok:
            return existing
        raise RefExists(f"The {kind} {name} exists already.")
    try:
        with transaction.atomic():
            return HubRef.objects.create(repo=repo, kind=kind, name=name, commit=at)
    except IntegrityError as exc:
        raise RefExists(f"The {kind} {name} exists already.") from exc


def delete_ref(repo: HubRepo, kind: str, name: str) -> None:
    if kind == RefKind.BRANCH and name == DEFAULT_BRANCH:
        raise InvalidRequest(f"The branch {DEFAULT_BRANCH} cannot be deleted.", param="branch")
    deleted, _ = HubRef.objects.filter(repo=repo, kind=kind, name=name).delete()
    if not deleted:
        raise RevisionNotFound(f"There is no {kind} {name}.")


def paths_under(files: Iterable[HubFile], folder: str, recursive: bool) -> list[dict]:
    """The entries of a tree listing under `folder` ('' for the root): files, and the folders
    that hold them (each folder once), sorted folders first as the hub lists them."""
    prefix = f"{folder}/" if folder else ""
    found_files: list[HubFile] = []
    folders: set[str] = set()
    for item in files:
        if not item.path.startswith(prefix):
            continue
        rest = item.path[len(prefix) :]
        parts = rest.split("/")
        for depth in range(1, len(parts)):
            folders.add(prefix + "/".join(parts[:depth]))
            if not recursive:
                break
        if recursive or len(parts) == 1:
            found_files.append(item)
    entries: list[dict] = [{"type": "directory", "path": path} for path in sorted(folders)]
    entries += [{"type": "file", "path": item.path, "file": item} for item in found_files]
    return entries
