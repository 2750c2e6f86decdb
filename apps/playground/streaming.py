"""One Playground run: a prompt sent to up to three panes at once, their answers streamed
back as one multiplexed `text/event-stream`.

The request (`POST …/playground/run`, JSON):

    {"messages": [{"role": "system"|"user"|"assistant", "content": "…"}, …],
     "params": {"temperature", "top_p", "max_tokens", "stop", "seed"},   (each optional)
     "panes": [{"target": "base"|"art_…"|"ep_…",
                "base_model": "…",          (a `base` pane's model; else the other panes')
                "messages": […]}, …]}       (a pane's own conversation, in place of the
                                             shared `messages`: its answers differ)

The answer, one event per line pair, in the order produced:

    data: {"pane": i, "delta": "…"}
    data: {"pane": i, "usage": {"prompt_tokens", "completion_tokens", "total_tokens"},
           "finish_reason": "stop"|"length"|null}        (an endpoint's: and "revision")
    data: {"pane": i, "error": "…"}
    data: {"done": true}

Each pane ends with exactly one `usage` or `error` event; `done` comes last. The panes'
requests go to their engines at once, so an engine batches those that share it (mixed
adapters in one batch). A client that goes away closes every upstream stream: the engines
stop generating.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
from asgiref.sync import sync_to_async

from apps.accounts.models import Organization, User
from apps.core.errors import ApiError, InvalidRequest, NotFound
from apps.core.locks import LockBusy
from apps.hub.models import HubCommit
from apps.jobs.models import Artifact
from apps.playground import services, targets
from apps.playground.models import PlaygroundServer
from apps.projects.models import Project
from apps.serving import engine_client, payloads
from apps.serving import selectors as serving_selectors
from apps.serving.engine_client import EngineAddress, EngineRefused, EngineUnavailable

logger = logging.getLogger(__name__)

MAX_PANES = 3
MAX_MESSAGES = 64
MAX_CHARS = 32_000  # all of one pane's message contents together
MAX_TOKENS = 2048
MAX_STOPS = 4
MAX_STOP_CHARS = 64
MAX_SEED = 2**31 - 1
ROLES = ("system", "user", "assistant")
PARAMS = ("temperature", "top_p", "max_tokens", "stop", "seed")
CHAT_PATH = "/v1/chat/completions"


# -- the request ---------------------------------------------------------------------------


@dataclass
class PaneIn:
    target: str
    base_model: str | None
    messages: list[dict] | None


@dataclass
class RunIn:
    messages: list[dict] | None
    params: dict
    panes: list[PaneIn]


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _messages(value: object, param: str) -> list[dict]:
    if not isinstance(value, list) or not value:
        raise InvalidRequest("messages is a non-empty list of messages.", param=param)
    if len(value) > MAX_MESSAGES:
        raise InvalidRequest(f"At most {MAX_MESSAGES} messages.", param=param)
    total = 0
    clean = []
    for index, message in enumerate(value):
        where = f"{param}[{index}]"
        if not isinstance(message, dict) or set(message) != {"role", "content"}:
            raise InvalidRequest('A message is {"role": …, "content": …}.', param=where)
        if message["role"] not in ROLES:
            raise InvalidRequest(f"role is one of {', '.join(ROLES)}.", param=f"{where}.role")
        if not isinstance(message["content"], str):
            raise InvalidRequest("content is a string.", param=f"{where}.content")
        total += len(message["content"])
        clean.append({"role": message["role"], "content": message["content"]})
    if total > MAX_CHARS:
        raise InvalidRequest(f"At most {MAX_CHARS} characters of messages.", param=param)
    if not any(message["role"] == "user" for message in clean):
        raise InvalidRequest("The messages hold no user message.", param=param)
    return clean


def _params(value: object) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidRequest("params is an object.", param="params")
    unknown = sorted(set(value) - set(PARAMS))
    if unknown:
        raise InvalidRequest("Unknown parameter.", param=f"params.{unknown[0]}")
    params = {name: value[name] for name in PARAMS if value.get(name) is not None}
    temperature = params.get("temperature")
    if temperature is not None and not (_number(temperature) and 0 <= temperature <= 2):
        raise InvalidRequest("temperature is a number from 0 to 2.", param="params.temperature")
    top_p = params.get("top_p")
    if top_p is not None and not (_number(top_p) and 0 < top_p <= 1):
        raise InvalidRequest("top_p is a number above 0, at most 1.", param="params.top_p")
    max_tokens = params.get("max_tokens")
    if max_tokens is not None and not (
        isinstance(max_tokens, int)
        and not isinstance(max_tokens, bool)
        and 1 <= max_tokens <= MAX_TOKENS
    ):
        raise InvalidRequest(
            f"max_tokens is a whole number from 1 to {MAX_TOKENS}.", param="params.max_tokens"
        )
    stop = params.get("stop")
    if isinstance(stop, str):
        stop = params["stop"] = [stop]
    if stop is not None and not (
        isinstance(stop, list)
        and len(stop) <= MAX_STOPS
        and all(isinstance(s, str) and 0 < len(s) <= MAX_STOP_CHARS for s in stop)
    ):
        raise InvalidRequest(
            f"stop is up to {MAX_STOPS} strings of 1 to {MAX_STOP_CHARS} characters.",
            param="params.stop",
        )
    if stop == []:
        del params["stop"]
    seed = params.get("seed")
    if seed is not None and not (
        isinstance(seed, int) and not isinstance(seed, bool) and 0 <= seed <= MAX_SEED
    ):
        raise InvalidRequest(f"seed is a whole number from 0 to {MAX_SEED}.", param="params.seed")
    return params


def parse_run(raw: bytes) -> RunIn:
    """The run request in `raw`, checked; InvalidRequest names the first bad field."""
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise InvalidRequest("The body is not valid JSON.") from exc
    if not isinstance(body, dict):
        raise InvalidRequest("The body is a JSON object.")
    unknown = sorted(set(body) - {"messages", "params", "panes"})
    if unknown:
        raise InvalidRequest("Unknown field.", param=unknown[0])
    panes_raw = body.get("panes")
    if not isinstance(panes_raw, list) or not 1 <= len(panes_raw) <= MAX_PANES:
        raise InvalidRequest(f"panes is a list of 1 to {MAX_PANES} panes.", param="panes")
    shared = _messages(body["messages"], "messages") if "messages" in body else None
    panes = []
    for index, pane in enumerate(panes_raw):
        where = f"panes[{index}]"
        if not isinstance(pane, dict) or not set(pane) <= {"target", "base_model", "messages"}:
            raise InvalidRequest(
                'A pane is {"target": …} (with "base_model" or "messages").', param=where
            )
        target = pane.get("target")
        if not isinstance(target, str) or not (
            target == "base" or target.startswith(("art_", "ep_", targets.HUB_PREFIX))
        ):
            raise InvalidRequest(
                'target is "base", "art_…", "hub:<org>/<name>[@rev]" or "ep_…".',
                param=f"{where}.target",
            )
        base_model = pane.get("base_model")
        if base_model is not None and (
            target != "base" or not isinstance(base_model, str) or not base_model.strip()
        ):
            raise InvalidRequest(
                "base_model names a base pane's model.", param=f"{where}.base_model"
            )
        own = _messages(pane["messages"], f"{where}.messages") if "messages" in pane else None
        if own is None and shared is None:
            raise InvalidRequest("messages is required.", param="messages")
        panes.append(PaneIn(target=target, base_model=base_model, messages=own))
    return RunIn(messages=shared, params=_params(body.get("params")), panes=panes)


# -- the plan: what each pane calls ----------------------------------------------------------


@dataclass
class PanePlan:
    index: int
    messages: list[dict]
    address: EngineAddress | None = None
    model: str | None = None  # the served name on the engine
    revision: str | None = None  # an endpoint's revision label
    server: PlaygroundServer | None = None
    artifact: Artifact | None = None
    hub_commit: HubCommit | None = None
    error: str | None = None


def plan_run(
    *,
    organization: Organization,
    project: Project,
    user: User | None,
    run: RunIn,
    may_start: bool = True,
) -> list[PanePlan]:
    """What each pane of `run` calls: its engine, served name and messages. Call in a
    thread (the ORM, and adapter uploads to the engines).

    Raises NotFound for a target that is not the organization's, InvalidRequest for a base
    model the pane may not pick, ServerStarting (503) when a Playground server the run needs
    is not up yet (after starting it), and server_for's errors. A pane whose adapter fails
    to load, or whose endpoint is not ready, gets its error in its plan: the others run."""
    chosen: list[targets.Target] = []
    for index, pane in enumerate(run.panes):
        if pane.target == targets.BASE:
            chosen.append(None)
            continue
        where = f"panes[{index}].target"
        if pane.target.startswith("art_"):
            artifact = targets.org_artifact(organization, pane.target)
            if artifact is None:
                raise NotFound("No such artifact.", param=where)
            target = targets.artifact_as_target(artifact)
            if target is None:
                raise InvalidRequest(
                    "The artifact's job does not say which base model it trained on.", param=where
                )
        elif pane.target.startswith(targets.HUB_PREFIX):
            target = targets.hub_target(organization, pane.target)
            if target is None:
                raise NotFound(
                    "No adapter at that revision of a model repository of this organization's hub.",
                    param=where,
                )
        else:
            target = targets.endpoint_target(organization, pane.target)
            if target is None:
                raise NotFound("No such endpoint (or it is stopped).", param=where)
        chosen.append(target)

    artifact_bases = []
    for target in chosen:
        if target is not None and target.base_model and target.base_model not in artifact_bases:
            artifact_bases.append(target.base_model)
    project_bases = None
    for index, pane in enumerate(run.panes):
        if chosen[index] is not None:
            continue
        where = f"panes[{index}].base_model"
        if pane.base_model is None:
            if project_bases is None:
                project_bases = targets.project_base_models(organization, project)
            candidates = artifact_bases or project_bases
            if len(candidates) != 1:
                raise InvalidRequest("Say which base model this pane talks to.", param=where)
            base_model = candidates[0]
        else:
            base_model = pane.base_model.strip()
            if base_model not in artifact_bases:
                if project_bases is None:
                    project_bases = targets.project_base_models(organization, project)
                if base_model not in project_bases:
                    raise InvalidRequest(
                        "Not a base model of this project's fine-tunes or of the other panes.",
                        param=where,
                    )
        chosen[index] = targets.base_target(base_model)

    servers: dict[str, PlaygroundServer] = {}
    for target in chosen:
        if target.base_model and target.base_model not in servers:
            servers[target.base_model] = services.server_for(
                organization=organization,
                project=project,
                base_model=target.base_model,
                user=user,
                may_start=may_start,
            )
    addresses = {}
    for base_model, server in servers.items():
        services.touch(server)
        addresses[base_model] = services.engine_for(server)
    starting = [base_model for base_model, address in addresses.items() if address is None]
    if starting:
        raise services.ServerStarting(
            f"The Playground server for {', '.join(starting)} is starting; "
            "try again in a few seconds."
        )

    plans = []
    for index, target in enumerate(chosen):
        plan = PanePlan(index=index, messages=run.panes[index].messages or run.messages)
        plans.append(plan)
        if target.kind == "endpoint":
            engine = serving_selectors.endpoint_engine(target.endpoint)
            if engine is None:
                plan.error = "The endpoint is not ready yet."
                continue
            plan.address, revision = engine
            plan.model, plan.revision = revision.served_name, revision.label
            continue
        plan.server = servers[target.base_model]
        plan.address = addresses[target.base_model]
        if target.kind == targets.BASE:
            plan.model = payloads.BASE_NAME
            continue
        plan.artifact, plan.hub_commit = target.artifact, target.hub_commit
        try:
            plan.model = services.ensure_adapter(
                plan.server, target.artifact, hub_commit=target.hub_commit
            )
        except (services.ServerStarting, EngineUnavailable, EngineRefused, LockBusy) as exc:
            logger.warning("pane %s: loading %s failed: %s", index, target.value, exc)
            plan.error = load_error(exc)
    return plans


def load_error(exc: Exception) -> str:
    """What a pane shows when its adapter could not be loaded."""
    if isinstance(exc, services.ServerStarting):
        return "The Playground server is restarting; send again in a few seconds."
    message = getattr(exc, "message", "") or str(exc)
    if isinstance(exc, ApiError):
        message = str(exc.detail)
    return f"The adapter could not be loaded: {message}"


# -- the stream ------------------------------------------------------------------------------


def event(data: dict) -> bytes:
    return b"data: " + json.dumps(data, separators=(",", ":")).encode() + b"\n\n"


def _engine_error(status: int, content: bytes) -> str:
    try:
        error = json.loads(content).get("error") or {}
        message = error.get("message") if isinstance(error, dict) else str(error)
    except (ValueError, AttributeError):
        message = ""
    return f"The server answered {status}" + (f": {message}" if message else ".")


async def _open(plan: PanePlan, params: dict) -> httpx.Response:
    body = {
        **params,
        "model": plan.model,
        "messages": plan.messages,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    client = engine_client.async_client()
    request = client.build_request(
        "POST", plan.address.url + CHAT_PATH, json=body, headers=plan.address.headers
    )
    return await client.send(request, stream=True)


async def _relay_pane(plan: PanePlan, params: dict, queue: asyncio.Queue) -> None:
    """Stream one pane's answer into `queue`, ending with its usage or error event. Its
    upstream is closed on the way out, whatever ends it (a cancellation included)."""
    upstream = None
    try:
        upstream = await _open(plan, params)
        if upstream.status_code == 404 and (plan.artifact or plan.hub_commit) is not None:
            # The engine lost the name (evicted by another run's load, or restarted): load
            # it again, once.
            await upstream.aclose()
            upstream = None
            plan.model = await sync_to_async(services.ensure_adapter)(
                plan.server, plan.artifact, hub_commit=plan.hub_commit, reload=True
            )
            upstream = await _open(plan, params)
        if upstream.status_code != 200:
            content = await upstream.aread()
            await queue.put(
                {"pane": plan.index, "error": _engine_error(upstream.status_code, content)}
            )
            return
        usage, finish_reason = None, None
        async for line in upstream.aiter_lines():
            if not line.startswith("data: "):
                continue
            data = line[6:].strip()
            if data == "[DONE]":
                break
            chunk = json.loads(data)
            if chunk.get("usage") and not chunk.get("choices"):
                usage = chunk["usage"]
                continue
            for choice in chunk.get("choices") or []:
                delta = (choice.get("delta") or {}).get("content")
                if delta:
                    await queue.put({"pane": plan.index, "delta": delta})
                if choice.get("finish_reason"):
                    finish_reason = choice["finish_reason"]
        end = {"pane": plan.index, "usage": usage, "finish_reason": finish_reason}
        if plan.revision:
            end["revision"] = plan.revision
        await queue.put(end)
    except httpx.HTTPError as exc:
        logger.warning("pane %s: the engine at %s broke off: %s", plan.index, plan.address, exc)
        await queue.put({"pane": plan.index, "error": "The server stopped answering."})
    except (ValueError, AttributeError, TypeError) as exc:
        logger.warning("pane %s: an unreadable event from the engine: %s", plan.index, exc)
        await queue.put({"pane": plan.index, "error": "The server sent something unreadable."})
    except Exception as exc:  # a reload that failed: the pane says so, the others go on
        await queue.put({"pane": plan.index, "error": load_error(exc)})
    finally:
        if upstream is not None:
            await upstream.aclose()
        queue.put_nowait(None)  # this pane is done


async def multiplex(plans: list[PanePlan], params: dict) -> AsyncIterator[bytes]:
    """The run's event stream: every pane's events as they come, then `done`."""
    queue: asyncio.Queue = asyncio.Queue()
    for plan in plans:
        if plan.error is not None:
            yield event({"pane": plan.index, "error": plan.error})
    live = [plan for plan in plans if plan.error is None]
    tasks = [asyncio.create_task(_relay_pane(plan, params, queue)) for plan in live]
    try:
        remaining = len(tasks)
        while remaining:
            item = await queue.get()
            if item is None:
                remaining -= 1
                continue
            yield event(item)
        yield event({"done": True})
    finally:
        # A disconnect (cancellation or close) lands here too: cancelling a pane's task
        # closes its upstream stream, which is what stops the engine generating.
        for task in tasks:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*tasks, return_exceptions=True)
