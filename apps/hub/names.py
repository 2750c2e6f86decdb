"""What a hub repository, revision and file path may be called.

Names follow the Hugging Face hub's rules so that what the stock client accepts, Trainyard
accepts: a repository is `<namespace>/<name>` where the namespace is an organization's slug
and the name is 1 to 96 of letters, digits, `-`, `_` and `.`, not starting or ending with
`-` or `.`, with no `--` or `..` and not ending in `.git`. A branch or tag is a git-like ref
name without `/` (the client puts a revision in one URL segment, and a decoded `/` there
could not be told from the path after it); a file path is relative, `/`-separated, without
empty, `.` or `..` parts.
"""

from __future__ import annotations

import re

from apps.core.errors import InvalidRequest

REPO_NAME_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9_])?")
REF_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,199}")
COMMIT_OID_RE = re.compile(r"[0-9a-f]{40}")
MAX_PATH_CHARS = 1000
DEFAULT_BRANCH = "main"


def repo_name_problem(name: object) -> str | None:
    """Why `name` cannot name a repository, or None."""
    if not isinstance(name, str) or not REPO_NAME_RE.fullmatch(name):
        return (
            "A repository name is 1 to 96 letters, digits, '-', '_' and '.', starting with a "
            "letter or digit and not ending with '-' or '.'."
        )
    if "--" in name or ".." in name or name.endswith(".git"):
        return "A repository name has no '--' or '..' and does not end in '.git'."
    return None


def check_repo_name(name: object, param: str = "name") -> str:
    problem = repo_name_problem(name)
    if problem:
        raise InvalidRequest(problem, param=param)
    return name  # type: ignore[return-value]


def ref_name_problem(name: object) -> str | None:
    """Why `name` cannot name a branch or tag, or None (git's rules, in short)."""
    if not isinstance(name, str) or not REF_NAME_RE.fullmatch(name):
        return "A branch or tag name is 1 to 200 letters, digits, '.', '_' and '-'."
    if ".." in name or name.endswith((".", ".lock")) or COMMIT_OID_RE.fullmatch(name):
        return "A branch or tag name has no '..', does not end in '.', and is not a commit id."
    return None


def check_ref_name(name: object, param: str = "branch") -> str:
    problem = ref_name_problem(name)
    if problem:
        raise InvalidRequest(problem, param=param)
    return name  # type: ignore[return-value]


def path_problem(path: object) -> str | None:
    """Why `path` cannot name a file in a repository, or None."""
    if not isinstance(path, str) or not path or len(path) > MAX_PATH_CHARS:
        return f"A file path is 1 to {MAX_PATH_CHARS} characters."
    if path.startswith("/") or "\\" in path or any(ord(c) < 32 for c in path):
        return "A file path is relative, with '/' between its parts and no control characters."
    parts = path.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return "A file path has no empty, '.' or '..' parts."
    if parts[0] == ".git":
        return "Nothing may be stored under .git/."
    return None


def check_path(path: object, param: str = "path") -> str:
    problem = path_problem(path)
    if problem:
        raise InvalidRequest(f"{problem} ({str(path)[:200]!r})", param=param)
    return path  # type: ignore[return-value]
