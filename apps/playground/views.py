"""The Playground pages of a project: the chat page, its run stream, the servers' status and
"Deploy as endpoint".

- The page (`?job=job_…`, `?artifact=art_…` preload panes) lists what a pane can talk to
  (`apps.playground.targets`) and shows the state of the Playground servers its first
  panes need; opening it starts nothing (a server is a billed serve job, and a link must
  not spend money). Its "Start" button (a POST to the page, CSRF-checked; members only)
  starts them so the engine warms while the person types; the first run starts them too.
  Any member may chat, viewers too; only members start servers and deploy.
- The run (`POST …/run`, JSON, session and CSRF header) answers one multiplexed event
  stream (`apps.playground.streaming`); its errors keep the API's shape, 503
  `playground_starting` while a server it needs starts.
- The status (`GET …/status?base=…`) is what the page polls while a server starts.
"""

from __future__ import annotations

import logging
from urllib.parse import urlencode

from asgiref.sync import sync_to_async
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    JsonResponse,
    StreamingHttpResponse,
)
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from apps.accounts.models import Membership, Role
from apps.accounts.tenancy import membership_for_slug, remember_org
from apps.core.api_errors import body_too_large, error_body
from apps.core.errors import ApiError
from apps.finetunes.demo import DEMO_PROMPT, is_demo_model
from apps.jobs.artifacts.store import public_artifact_id
from apps.playground import services, streaming, targets
from apps.playground.models import PlaygroundServer
from apps.projects.models import Project
from apps.serving import services as serving_services

logger = logging.getLogger(__name__)

PANES = 3
RETRY_AFTER_S = "5"


def _project_for(membership: Membership, project_slug: str) -> Project:
    return get_object_or_404(Project.objects.for_org(membership.organization), slug=project_slug)


def _preloaded(
    request: HttpRequest, membership: Membership
) -> tuple[list[targets.Target], dict[str, str]]:
    """The targets `?job=`, `?hub=` and `?artifact=` name, in that order, and the query of those
    found. One that is not the organization's is left out with a message that does not
    repeat the id (on the page itself: a start's redirect to it would say it twice)."""
    warn = messages.warning if request.method == "GET" else lambda *args: None
    org = membership.organization
    found, query = [], {}
    lookups = (
        ("job", targets.job_target, "That job is not here, or it has no final adapter yet."),
        ("hub", targets.hub_target, "That hub revision is not here, or holds no adapter."),
        ("artifact", targets.artifact_target, "That checkpoint or adapter is not here."),
    )
    for param, lookup, missing in lookups:
        value = request.GET.get(param, "").strip()
        if not value:
            continue
        target = lookup(org, value)
        if target is None:
            warn(request, missing)
            continue
        query[param] = value
        if target.key not in {t.key for t in found}:
            found.append(target)
    return found, query


def _initial_panes(
    preloaded: list[targets.Target], groups: list[targets.Group]
) -> list[targets.Target | None]:
    """The panes' first targets: the base model beside what the URL named; without one,
    the newest base model beside its newest fine-tune's final adapter."""
    first: list[targets.Target] = []
    if preloaded:
        if preloaded[0].base_model:
            first.append(targets.base_target(preloaded[0].base_model))
        first += preloaded
    else:
        listed = [target for group in groups for target in group.targets]
        base = next((t for t in listed if t.kind == targets.BASE), None)
        if base is not None:
            first.append(base)
            adapter = next(
                (
                    t
                    for t in listed
                    if t.kind == "artifact"
                    and t.base_model == base.base_model
                    and t.artifact.kind == "adapter"
                ),
                None,
            )
            if adapter is not None:
                first.append(adapter)
    first = first[:PANES]
    return first + [None] * (PANES - len(first))


def _start_servers(request, membership, project, panes) -> list[dict]:
    """Start (or find) the servers the first panes need; what the page shows of them."""
    shown = []
    for base_model in dict.fromkeys(t.base_model for t in panes if t and t.base_model):
        try:
            server = services.server_for(
                organization=membership.organization,
                project=project,
                base_model=base_model,
                user=request.user,
                may_start=membership.can(Role.MEMBER),
            )
        except services.StartNotAllowed:
            shown.append({"base_model": base_model, "state": "stopped", "job": None})
            continue
        except ApiError as error:
            messages.error(request, f"The Playground server could not start: {error.detail}")
            shown.append({"base_model": base_model, "state": "stopped", "job": None})
            continue
        services.touch(server)
        shown.append(_server_status(server, base_model))
    return shown


def _page_url(membership: Membership, project: Project, query: dict[str, str]) -> str:
    url = reverse(
        "playground",
        kwargs={"org_slug": membership.organization.slug, "project_slug": project.slug},
    )
    return f"{url}?{urlencode(query)}" if query else url


def _servers_shown(organization, panes) -> list[dict]:
    """What the page shows of the servers the first panes need; reads only."""
    bases = list(dict.fromkeys(t.base_model for t in panes if t and t.base_model))
    servers = {
        server.base_model: server
        for server in PlaygroundServer.objects.filter(
            organization=organization, base_model__in=bases
        ).select_related("job")
    }
    return [_server_status(servers.get(base), base) for base in bases]


def _server_status(server: PlaygroundServer | None, base_model: str) -> dict:
    job = server.job if server is not None and server.job_id else None
    return {
        "base_model": base_model,
        "state": services.server_state(server),
        "job": job.public_id if job is not None else None,
    }


@login_required
@require_http_methods(["GET", "POST"])
def playground(request: HttpRequest, org_slug: str, project_slug: str) -> HttpResponse:
    """GET shows the page; POST (the "Start" button) starts the servers of the same URL's
    first panes, then shows the page again."""
    membership = membership_for_slug(request.user, org_slug)
    project = _project_for(membership, project_slug)
    remember_org(request, membership.organization)
    preloaded, query = _preloaded(request, membership)
    groups = targets.choices(membership.organization, project, preloaded)
    panes = _initial_panes(preloaded, groups)
    if request.method == "POST":
        if not membership.can(Role.MEMBER):
            raise PermissionDenied("Viewers cannot start Playground servers.")
        _start_servers(request, membership, project, panes)
        return redirect(_page_url(membership, project, query))
    servers = _servers_shown(membership.organization, panes)
    demo_keys = _demo_keys(membership.organization, groups)
    context = {
        "org": membership.organization,
        "membership": membership,
        "project": project,
        "groups": groups,
        "panes": [
            {
                "number": index + 1,
                "index": index,
                "target": target,
                "demo": target is not None and target.key in demo_keys,
            }
            for index, target in enumerate(panes)
        ],
        "servers": servers,
        "page_url": _page_url(membership, project, query),
        "may_start": any(server["state"] == "stopped" for server in servers)
        and membership.can(Role.MEMBER),
        "can_deploy": membership.can(Role.MEMBER),
        "max_tokens": streaming.MAX_TOKENS,
        "demo_keys": demo_keys,
        "demo": any(target is not None and target.key in demo_keys for target in panes),
        "demo_prompt": DEMO_PROMPT,
    }
    return TemplateResponse(request, "playground/page.html", context)


def _demo_keys(organization, groups) -> set[str]:
    """The choices that talk to the tiny random demo model (`seed_demo`'s), directly or
    through an adapter or endpoint on it: their panes say it cannot make sense."""
    return {
        target.key
        for group in groups
        for target in group.targets
        if is_demo_model(
            organization,
            target.base_model or (target.endpoint.base_model if target.endpoint else None),
        )
    }


@never_cache
@login_required
@require_GET
def playground_status(request: HttpRequest, org_slug: str, project_slug: str) -> JsonResponse:
    """The state of the organization's servers for `?base=` (repeated): `ready`, `starting`
    or `stopped`. Reads only: a stopped server starts with the next run."""
    membership = membership_for_slug(request.user, org_slug)
    _project_for(membership, project_slug)
    wanted = list(dict.fromkeys(b.strip() for b in request.GET.getlist("base") if b.strip()))[
        :PANES
    ]
    servers = {
        server.base_model: server
        for server in PlaygroundServer.objects.filter(
            organization=membership.organization, base_model__in=wanted
        ).select_related("job")
    }
    return JsonResponse({"servers": [_server_status(servers.get(base), base) for base in wanted]})


@login_required
@require_POST
def playground_deploy(request: HttpRequest, org_slug: str, project_slug: str) -> HttpResponse:
    """Deploy a pane's artifact as a new endpoint of the project; on to the endpoint's page.
    A refusal (a name taken or malformed, no compute, a budget) comes back as a message."""
    membership = membership_for_slug(request.user, org_slug)
    project = _project_for(membership, project_slug)
    if not membership.can(Role.MEMBER):
        raise PermissionDenied("Viewers cannot deploy endpoints.")
    org = membership.organization
    back = reverse("playground", kwargs={"org_slug": org.slug, "project_slug": project.slug})
    target = targets.artifact_target(org, request.POST.get("artifact", "").strip())
    if target is None:
        messages.error(request, "Pick a final adapter or a checkpoint to deploy.")
        return redirect(back)
    back += f"?artifact={target.value}"
    try:
        endpoint = serving_services.endpoint_create(
            organization=org,
            project_id=project.public_id,
            name=request.POST.get("name", "").strip(),
            base_model=target.base_model,
            target={"artifact": public_artifact_id(target.artifact)},
            who=serving_services.Who(user=request.user),
        )
    except ApiError as error:
        messages.error(request, f"Not deployed: {error.detail}")
        return redirect(back)
    messages.success(request, f"Endpoint {endpoint.name} is starting with {target.label}.")
    return redirect(reverse("endpoint-detail", args=[org.slug, endpoint.public_id]))


# -- the run ---------------------------------------------------------------------------------


def _error(status: int, error_type: str, message: str, param: str | None = None) -> JsonResponse:
    answer = JsonResponse(error_body(error_type, message, param), status=status)
    if status == 503:
        answer["Retry-After"] = RETRY_AFTER_S
    return answer


def _api_error(error: ApiError) -> JsonResponse:
    return _error(error.status_code, error.error_type, str(error.detail), error.param)


def _membership_and_project(user, org_slug: str, project_slug: str):
    membership = membership_for_slug(user, org_slug)
    return membership, _project_for(membership, project_slug)


async def playground_run(request: HttpRequest, org_slug: str, project_slug: str) -> HttpResponse:
    """Send one prompt to every pane; their answers as one event stream. Session auth and
    the CSRF header (the middleware checks it before this runs)."""
    if request.method != "POST":
        answer = _error(405, "method_not_allowed", "Use POST.")
        answer["Allow"] = "POST"
        return answer
    user = await request.auser()
    if not user.is_authenticated:
        return _error(401, "unauthenticated", "Sign in first.")
    try:
        membership, project = await sync_to_async(_membership_and_project)(
            user, org_slug, project_slug
        )
    except Http404:
        return _error(404, "not_found", "Not found.")
    try:
        run = streaming.parse_run(request.body)
        plans = await sync_to_async(streaming.plan_run)(
            organization=membership.organization,
            project=project,
            user=user,
            run=run,
            may_start=membership.can(Role.MEMBER),
        )
    except RequestDataTooBig:
        return _api_error(body_too_large())
    except ApiError as error:
        return _api_error(error)
    response = StreamingHttpResponse(
        streaming.multiplex(plans, run.params), content_type="text/event-stream"
    )
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response
