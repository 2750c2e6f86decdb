"""Who calls the hub's protocol endpoints, and how their errors are answered.

The Hugging Face client sends `Authorization: Bearer <token>`; the token is a Trainyard API
key (`HF_TOKEN=ty_…`), or the hub token a workload is given (`tyh_…`, one per attempt: it
reads its job's organization's repositories, as a viewer, until the attempt ends). Every
repository is private to its organization: with no key, or a key of another organization, a
repository is not found. Any role reads; writing (creating repositories, committing,
branches and tags) needs `member` or above.

Errors are answered the way the client reads them: the status, `X-Error-Code` (which picks
the client's exception: RepoNotFound, RevisionNotFound, EntryNotFound), `X-Error-Message`,
and a JSON body `{"error": message, "error_type": stable type}`.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from rest_framework import exceptions

from apps.accounts.authentication import ApiKeyAuthentication
from apps.accounts.models import Organization, Role
from apps.accounts.tenancy import Caller, caller_for_api_key
from apps.core.errors import ApiError
from apps.hub.errors import RepoNotFound
from apps.hub.models import HubRepo
from apps.hub.repos import find_repo
from apps.jobs.execution.tokens import HUB_PREFIX, hub_nonce_from
from apps.jobs.models import Attempt

log = logging.getLogger(__name__)

INVALID_CREDENTIALS = "Invalid credentials in Authorization header"


class Unauthenticated(ApiError):
    status_code = 401
    error_type = "unauthenticated"
    default_detail = INVALID_CREDENTIALS
    hub_code = None


class ReadOnlyRole(ApiError):
    status_code = 403
    error_type = "permission_denied"
    default_detail = "Your role in this organization may read its repositories, not write them."


def hub_error(error: ApiError) -> HttpResponse:
    message = str(error.detail)
    answer = JsonResponse(
        {"error": message, "error_type": error.error_type}, status=error.status_code
    )
    code = getattr(error, "hub_code", None)
    if code:
        answer["X-Error-Code"] = code
    # A header value is one line of latin-1.
    answer["X-Error-Message"] = (
        message.replace("\n", " ").encode("latin-1", "replace").decode("latin-1")[:500]
    )
    return answer


def _attempt_caller(token: str) -> Caller | None:
    """A viewer of the attempt's organization while the attempt runs; None for a token that
    is not a hub token. Raises Unauthenticated for one that is forged or whose attempt has
    ended."""
    if not token.startswith(f"{HUB_PREFIX}_"):
        return None
    nonce = hub_nonce_from(token)
    attempt = (
        Attempt.objects.select_related("job__organization").filter(token_nonce=nonce).first()
        if nonce
        else None
    )
    if attempt is None or attempt.ended_at is not None or attempt.job.is_terminal:
        raise Unauthenticated()
    return Caller(organization=attempt.job.organization, role=Role.VIEWER)


def hub_caller(request: HttpRequest) -> Caller | None:
    """The caller behind the request's API key or hub token; None without one. Raises
    Unauthenticated for one that is not valid (unknown, revoked, expired, or of an attempt
    that has ended)."""
    header = request.META.get("HTTP_AUTHORIZATION", "")
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    if scheme.lower() == "bearer":
        attempt_caller = _attempt_caller(token.strip())
        if attempt_caller is not None:
            return attempt_caller
    try:
        found = ApiKeyAuthentication().authenticate(request)
    except exceptions.AuthenticationFailed as exc:
        raise Unauthenticated() from exc
    if found is None:
        raise Unauthenticated()
    return caller_for_api_key(found[1])


def require_caller(request: HttpRequest) -> Caller:
    caller = hub_caller(request)
    if caller is None:
        # The hub's answer to an anonymous caller: the repository may exist, but not for them.
        raise RepoNotFound("Authentication is required: set HF_TOKEN to a Trainyard API key.")
    return caller


def require_writer(caller: Caller) -> None:
    if not caller.can(Role.MEMBER):
        raise ReadOnlyRole(
            f"Your role ({caller.role}) in {caller.organization.slug} may read its "
            "repositories, not write them."
        )


def namespace_of(caller: Caller, namespace: str | None) -> Organization:
    """The organization a repository id's namespace names, which must be the caller's."""
    if namespace not in (None, "", caller.organization.slug):
        raise RepoNotFound()
    return caller.organization


def repo_for(caller: Caller, kind: str, namespace: str, name: str) -> HubRepo:
    return find_repo(namespace_of(caller, namespace), kind, name)


def hub_view(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """A protocol view: no CSRF (the client carries a key, never a cookie) and ApiErrors
    answered the client's way."""

    @csrf_exempt
    @functools.wraps(view)
    def wrapped(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        try:
            return view(request, *args, **kwargs)
        except ApiError as error:
            return hub_error(error)

    return wrapped
