"""The hub's errors. Each is an `ApiError` (a status and a stable `error_type`) with the
`hub_code` the Hugging Face client reads from `X-Error-Code` to raise its own exception
(RepositoryNotFoundError, RevisionNotFoundError, RemoteEntryNotFoundError)."""

from __future__ import annotations

from rest_framework import status

from apps.core.errors import ApiError, Conflict, NotFound


class RepoNotFound(NotFound):
    error_type = "repo_not_found"
    default_detail = "Repository not found."
    hub_code = "RepoNotFound"


class RevisionNotFound(NotFound):
    error_type = "revision_not_found"
    default_detail = "Revision not found."
    hub_code = "RevisionNotFound"


class EntryNotFound(NotFound):
    error_type = "entry_not_found"
    default_detail = "Entry not found."
    hub_code = "EntryNotFound"


class RepoExists(Conflict):
    error_type = "repo_exists"
    default_detail = "You already created this repository."


class RepoInUse(Conflict):
    error_type = "repo_in_use"
    default_detail = "An endpoint serves a commit of this repository."


class RefExists(Conflict):
    error_type = "ref_exists"
    default_detail = "A branch or tag with this name exists."


class ParentMismatch(ApiError):
    """The commit names a parent that is no longer the branch's head: someone committed in
    between, and committing anyway could undo their change."""

    status_code = status.HTTP_412_PRECONDITION_FAILED
    error_type = "parent_mismatch"
    default_detail = "A commit has happened since. Please refresh and try again."
