"""Every write that matters for endpoints: create, set the target (a new revision), roll
back, stop, and the sync that brings an engine in line with its endpoint's revisions.

How a swap goes (`endpoint_set_target`, then `endpoint_sync` on the worker):
1. A new revision r(n+1) is stored `loading` with its never-reused served name.
2. The sync uploads its artifact to the engine and loads it under that name beside what is
   already loaded, runs one short greedy completion on it (the smoke test), then flips the
   endpoint in one row update: `current_revision` = r(n+1), `previous_revision` = r(n). A
   page of the endpoint is pushed the change.
3. r(n) stays loaded so a rollback is one more row update; revisions older than that are
   unloaded: the engine lets their requests in flight finish first.
A revision that fails to load or fails its smoke test is `failed`; the endpoint keeps
answering with what it had. A restarted engine (a preempted serve job placed again) is
synced the same way: the current and previous revisions are loaded before the endpoint
answers again, so it comes back on the revision it had.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from django.db import IntegrityError, transaction
from django.utils import timezone

from apps.accounts.models import ApiKey, Organization, User
from apps.core.errors import ApiError, Conflict, InvalidRequest, NotFound
from apps.core.locks import redis_lock
from apps.core.transactions import after_commit
from apps.finetunes import payloads as finetune_payloads
from apps.hub import repos as hub_repos
from apps.hub.models import HubCommit, RepoKind
from apps.hub.names import DEFAULT_BRANCH
from apps.jobs import services as job_services
from apps.jobs.artifacts.store import artifact_pk
from apps.jobs.models import Artifact, Job
from apps.projects.models import Project
from apps.serving import adapters, endpoint_hooks, engine_client, enqueue, live, payloads
from apps.serving.engine_client import EngineAddress, EngineRefused, EngineUnavailable
from apps.serving.models import Endpoint, EndpointRequest, EndpointRevision, Promotion
from runner.protocol import hub_reference

logger = logging.getLogger(__name__)

NAME_RE = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
SYNC_LOCK_S = 300


class EndpointNameTaken(Conflict):
    error_type = "endpoint_name_taken"
    default_detail = "An endpoint of this organization already has that name."


class BaseModelMismatch(InvalidRequest):
    error_type = "base_model_mismatch"


class NoAdapter(Conflict):
    error_type = "no_adapter"
    default_detail = "The job has no final adapter (yet)."


class NotAnAdapter(InvalidRequest):
    error_type = "not_an_adapter"


class EndpointStopped(Conflict):
    error_type = "endpoint_stopped"
    default_detail = "The endpoint is stopped."


class NothingToRollBack(Conflict):
    error_type = "no_previous_revision"
    default_detail = "The endpoint has no previous revision loaded to roll back to."


@dataclass(frozen=True)
class Who:
    """Who asked: a signed-in user or an API key."""

    user: User | None = None
    key: ApiKey | None = None


# -- targets -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """What a revision serves: an artifact, or an adapter at one commit of a hub repository
    (`hub_revision` as the target named it). `base_model`: what it was trained on, where
    that is known."""

    artifact: Artifact | None = None
    hub_commit: HubCommit | None = None
    hub_revision: str = ""
    base_model: str | None = None


TARGET_SHAPES = 'The target is {"artifact": "art_…"}, {"job": "job_…"} or {"hub": "org/name@rev"}.'


def resolve_target(*, organization: Organization, target: object) -> Target:
    """What a target names: `{"artifact": "art_…"}` (a final adapter or a checkpoint of one
    of the organization's jobs), `{"job": "job_…"}` (that job's final adapter, of its newest
    attempt that uploaded one) or `{"hub": "<org>/<name>[@revision]"}` (the adapter in a
    model repository of the organization's hub, at that branch, tag or commit, `main` when
    none is given: pinned to the commit it names now)."""
    keys = {"artifact", "job", "hub"}
    if not isinstance(target, dict) or len(target) != 1 or not target.keys() <= keys:
        raise InvalidRequest(TARGET_SHAPES, param="target")
    if "hub" in target:
        return _hub_target(organization, target["hub"])
    artifacts = Artifact.objects.select_related("job").filter(job__organization=organization)
    if "artifact" in target:
        value = target["artifact"]
        if not isinstance(value, str):
            raise InvalidRequest("An artifact id is a string.", param="target.artifact")
        artifact = artifacts.filter(pk=artifact_pk(value, param="target.artifact")).first()
        if artifact is None:
            raise NotFound("No such artifact.")
        if artifact.kind == Artifact.Kind.MERGED:
            raise NotAnAdapter(
                "Merged weights are a whole model, not an adapter: serve them as a base model.",
                param="target.artifact",
            )
        return Target(artifact=artifact, base_model=base_model_of_artifact(artifact))
    value = target["job"]
    if not isinstance(value, str):
        raise InvalidRequest("A job id is a string.", param="target.job")
    job = Job.objects.for_org(organization).filter(public_id=value).first()
    if job is None:
        raise NotFound("No such job.")
    artifact = (
        artifacts.filter(job=job, kind=Artifact.Kind.ADAPTER).order_by("-attempt", "-id").first()
    )
    if artifact is None:
        raise NoAdapter()
    return Target(artifact=artifact, base_model=base_model_of_artifact(artifact))


def _hub_target(organization: Organization, value: object) -> Target:
    if not isinstance(value, str) or not value.strip():
        raise InvalidRequest("A hub target is `<org>/<name>[@revision]`.", param="target.hub")
    repo_id, revision = hub_reference(value.strip())
    namespace, _, name = repo_id.partition("/")
    if namespace != organization.slug or not name:
        raise NotFound(f"No model repository {repo_id} in this organization's hub.")
    repo = hub_repos.find_repo(organization, RepoKind.MODEL, name)
    commit = hub_repos.resolve(repo, revision or DEFAULT_BRANCH)
    config = adapters.adapter_config(commit)
    if config is None:
        raise NotAnAdapter(
            f"{repo_id} at {revision or DEFAULT_BRANCH} holds no LoRA adapter "
            f"({adapters.ADAPTER_CONFIG} at its top level).",
            param="target.hub",
        )
    base = config.get("base_model_name_or_path")
    return Target(
        hub_commit=commit,
        hub_revision=f"{repo_id}@{revision or DEFAULT_BRANCH}",
        base_model=base.strip() if isinstance(base, str) and base.strip() else None,
    )


def base_model_of_artifact(artifact: Artifact) -> str | None:
    """The base model the artifact's job trained on, where the job says (a fine-tune)."""
    config = finetune_payloads.config_of(artifact.job) or {}
    model = config.get("model")
    return model.strip() if isinstance(model, str) else None


def fits_base(target: Target, base_model: str) -> bool:
    """Whether the target's adapter fits `base_model`. An artifact's job names exactly what
    it trained on; a hub adapter's own config names the base's repository without a
    revision, so only the repository is compared."""
    trained_on = target.base_model
    if trained_on is None:
        return True
    if target.artifact is not None:
        return trained_on == base_model.strip()
    return hub_reference(trained_on.strip())[0] == hub_reference(base_model.strip())[0]


def _check_base(target: Target, base_model: str) -> None:
    trained_on = target.base_model
    if not fits_base(target, base_model):
        what = "The artifact" if target.artifact is not None else target.hub_revision
        raise BaseModelMismatch(
            f"{what} was trained on {trained_on!r}, not the endpoint's base model {base_model!r}.",
            param="target",
        )


# -- create, target, rollback, stop --------------------------------------------------------


def _new_revision(endpoint: Endpoint, target: Target, who: Who) -> EndpointRevision:
    """Call under the endpoint's row lock."""
    number = endpoint.revision_count + 1
    Endpoint.objects.filter(pk=endpoint.pk).update(revision_count=number)
    endpoint.revision_count = number
    return EndpointRevision.objects.create(
        endpoint=endpoint,
        number=number,
        artifact=target.artifact,
        hub_commit=target.hub_commit,
        hub_revision=target.hub_revision,
        served_name=f"{endpoint.name}-r{number}",
        created_by=who.user,
        created_by_key=who.key,
    )


def endpoint_create(
    *,
    organization: Organization,
    project_id: str,
    name: str,
    base_model: str,
    target: object,
    compute: dict | None = None,
    who: Who | None = None,
) -> Endpoint:
    """Create an endpoint, its first revision (loading) and the serve job that runs its
    engine, in one transaction: the job's hold is taken with it, and a refused job (no
    balance, a budget) leaves no endpoint behind. The revision goes live when the engine is
    up and the revision passed its smoke test."""
    who = who or Who()
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise InvalidRequest(
            "A name is 1 to 63 lowercase letters, digits and dashes, starting and ending with "
            "a letter or digit.",
            param="name",
        )
    if not isinstance(base_model, str) or not base_model.strip() or len(base_model) > 500:
        raise InvalidRequest("The base model is a hub id or a path.", param="base_model")
    if compute is not None and not isinstance(compute, dict):
        raise InvalidRequest("compute is an object.", param="compute")
    project = Project.objects.for_org(organization).filter(public_id=project_id).first()
    if project is None:
        raise NotFound("No such project.")
    resolved = resolve_target(organization=organization, target=target)
    _check_base(resolved, base_model)
    try:
        with transaction.atomic():
            endpoint = Endpoint.objects.create(
                organization=organization,
                project=project,
                name=name,
                base_model=base_model.strip(),
                compute=compute or dict(payloads.DEFAULT_COMPUTE),
                created_by=who.user,
                created_by_key=who.key,
            )
            _new_revision(endpoint, resolved, who)
            created = job_services.job_create(
                organization=organization,
                payload=payloads.serve_job_payload(
                    name=f"endpoint {name}",
                    project_id=project.public_id,
                    base_model=endpoint.base_model,
                    serves_for=payloads.endpoint_for(endpoint.public_id),
                    compute=endpoint.compute,
                ),
                created_by=who.user,
                created_by_key=who.key,
                kind=Job.Kind.SERVE,
            )
            endpoint.job = created.job
            endpoint.save(update_fields=["job", "updated_at"])
    except IntegrityError as exc:
        if Endpoint.objects.filter(organization=organization, name=name).exists():
            raise EndpointNameTaken() from exc
        raise
    return endpoint


def _locked(endpoint: Endpoint) -> Endpoint:
    return (
        Endpoint.objects.select_for_update(of=("self",), no_key=True)
        .select_related("current_revision", "previous_revision", "job")
        .get(pk=endpoint.pk)
    )


def endpoint_set_target(
    *, endpoint: Endpoint, target: object, who: Who | None = None
) -> EndpointRevision:
    """A new revision serving `target`; it goes live once loaded and smoke-tested."""
    who = who or Who()
    resolved = resolve_target(organization=endpoint.organization, target=target)
    _check_base(resolved, endpoint.base_model)
    with transaction.atomic():
        locked = _locked(endpoint)
        if locked.state == Endpoint.State.STOPPED:
            raise EndpointStopped()
        revision = _new_revision(locked, resolved, who)
        after_commit(_sync_soon, locked.pk)
        after_commit(live.endpoint_changed, locked.pk)
    return revision


def endpoint_rollback(*, endpoint: Endpoint, who: Who | None = None) -> Endpoint:
    """Flip back to the previous revision (still loaded on the engine) in one row update."""
    who = who or Who()
    with transaction.atomic():
        locked = _locked(endpoint)
        if locked.state == Endpoint.State.STOPPED:
            raise EndpointStopped()
        previous, current = locked.previous_revision, locked.current_revision
        attempt = locked.job.attempt_count if locked.job else None
        if (
            previous is None
            or previous.state != EndpointRevision.State.READY
            or previous.loaded_on_attempt != attempt
        ):
            raise NothingToRollBack()
        Endpoint.objects.filter(pk=locked.pk).update(
            current_revision=previous, previous_revision=current, updated_at=timezone.now()
        )
        Promotion.objects.create(
            endpoint=locked,
            revision=previous,
            replaced=current,
            kind=Promotion.Kind.ROLLBACK,
            by_user=who.user,
            by_key=who.key,
        )
        after_commit(live.endpoint_changed, locked.pk)
    return Endpoint.objects.get(pk=locked.pk)


def endpoint_stop(*, endpoint: Endpoint) -> Endpoint:
    """Stop serving: the serve job is terminated, every revision retired. Idempotent."""
    with transaction.atomic():
        locked = _locked(endpoint)
        if locked.state != Endpoint.State.STOPPED:
            Endpoint.objects.filter(pk=locked.pk).update(
                state=Endpoint.State.STOPPED, stopped_at=timezone.now()
            )
            locked.revisions.exclude(state=EndpointRevision.State.FAILED).update(
                state=EndpointRevision.State.RETIRED, loaded_on_attempt=None
            )
            after_commit(live.endpoint_changed, locked.pk)
        job = locked.job
    if job is not None:
        job_services.job_terminate(job=job, message="The endpoint was stopped.")
    return Endpoint.objects.get(pk=endpoint.pk)


# -- the sync --------------------------------------------------------------------------------


def _sync_soon(endpoint_id: int) -> None:
    enqueue.sync_endpoint_by_id(endpoint_id)


def endpoint_sync(endpoint_id: int) -> None:
    """Bring the endpoint's engine in line with its revisions: load the current and previous
    ones where the engine lacks them, load, smoke-test and promote newer loading ones, and
    unload the rest. Safe to run twice and at any time; does nothing until the engine runs.
    Raises EngineUnavailable (the task retries) when the engine stops answering midway."""
    with redis_lock(f"trainyard:serving:sync:{endpoint_id}", SYNC_LOCK_S):
        endpoint = Endpoint.objects.select_related("job").filter(pk=endpoint_id).first()
        if endpoint is None or endpoint.state == Endpoint.State.STOPPED:
            return
        address = engine_client.address_for(endpoint.job)
        if address is None:
            return
        loaded = engine_client.loaded_models(address)
        for revision in _wanted(endpoint):
            _bring_up(endpoint, revision, address, loaded)
        _unload_unwanted(endpoint, address, loaded)


def _wanted(endpoint: Endpoint) -> list[EndpointRevision]:
    """The current and previous revisions, then the loading ones newer than the current,
    oldest first (the newest is promoted last, so it ends up current)."""
    endpoint.refresh_from_db()
    keep = [
        revision
        for revision in (endpoint.current_revision, endpoint.previous_revision)
        if revision is not None and revision.state == EndpointRevision.State.READY
    ]
    newest_live = endpoint.current_revision.number if endpoint.current_revision else 0
    loading = endpoint.revisions.filter(
        state=EndpointRevision.State.LOADING, number__gt=newest_live
    ).order_by("number")
    return [*keep, *loading]


def _bring_up(
    endpoint: Endpoint, revision: EndpointRevision, address: EngineAddress, loaded: set[str]
) -> None:
    revision.refresh_from_db()
    if revision.state not in (EndpointRevision.State.LOADING, EndpointRevision.State.READY):
        return
    try:
        if revision.served_name not in loaded:
            with adapters.archive_of(revision) as archive:
                engine_client.load_adapter(address, revision.served_name, archive)
            loaded.add(revision.served_name)
        if revision.state == EndpointRevision.State.LOADING:
            engine_client.smoke(address, revision.served_name)
    except EngineRefused as exc:
        if revision.state == EndpointRevision.State.LOADING:
            _fail(revision, f"The engine refused it: {exc.message or exc.error_type}")
            return
        raise EngineUnavailable(f"the engine refused {revision.served_name}: {exc}") from exc
    revision_mark_loaded(revision=revision, attempt=address.attempt)
    if revision.state == EndpointRevision.State.LOADING:
        _promote(endpoint, revision)


def revision_mark_loaded(*, revision: EndpointRevision, attempt: int) -> None:
    """Record that `revision` is loaded on the serve job's `attempt`. A ready revision
    loaded again on a new attempt (the serve job came back after a preemption) turns the
    endpoint from `starting` to `ready` without any promotion, so that change is pushed
    here; a loading one is pushed by its promotion."""
    changed = (
        EndpointRevision.objects.filter(pk=revision.pk)
        .exclude(loaded_on_attempt=attempt)
        .update(loaded_on_attempt=attempt)
    )
    if changed and revision.state == EndpointRevision.State.READY:
        after_commit(live.endpoint_changed, revision.endpoint_id)


def _fail(revision: EndpointRevision, message: str) -> None:
    EndpointRevision.objects.filter(pk=revision.pk).update(
        state=EndpointRevision.State.FAILED, error_message=message[:2000], loaded_on_attempt=None
    )
    after_commit(live.endpoint_changed, revision.endpoint_id)
    after_commit(_tell_failed, revision.pk, message)


def _promote(endpoint: Endpoint, revision: EndpointRevision) -> None:
    """Make a loaded, smoke-tested revision current in one row update, unless a newer one
    already is (then it is only ready)."""
    now = timezone.now()
    with transaction.atomic():
        locked = _locked(endpoint)
        EndpointRevision.objects.filter(pk=revision.pk).update(
            state=EndpointRevision.State.READY, ready_at=now
        )
        current = locked.current_revision
        if locked.state == Endpoint.State.STOPPED or (current and current.number > revision.number):
            return
        Endpoint.objects.filter(pk=locked.pk).update(
            current_revision=revision,
            previous_revision=current,
            state=Endpoint.State.READY,
            updated_at=now,
        )
        Promotion.objects.create(
            endpoint=locked,
            revision=revision,
            replaced=current,
            kind=Promotion.Kind.SWAP if current else Promotion.Kind.FIRST,
            by_user=revision.created_by,
            by_key=revision.created_by_key,
            at=now,
        )
        after_commit(live.endpoint_changed, locked.pk)
        after_commit(_tell_ready, revision.pk)


def _tell_ready(revision_id: int) -> None:
    revision = EndpointRevision.objects.select_related("endpoint").get(pk=revision_id)
    endpoint_hooks.ready(revision.endpoint, revision)


def _tell_failed(revision_id: int, message: str) -> None:
    revision = EndpointRevision.objects.select_related("endpoint").get(pk=revision_id)
    endpoint_hooks.failed(revision.endpoint, revision, message)


def _unload_unwanted(endpoint: Endpoint, address: EngineAddress, loaded: set[str]) -> None:
    """Unload this endpoint's revisions that are neither current, previous nor loading; the
    engine drains their requests in flight first."""
    endpoint.refresh_from_db()
    keep = {endpoint.current_revision_id, endpoint.previous_revision_id}
    for revision in endpoint.revisions.filter(served_name__in=loaded).exclude(
        state=EndpointRevision.State.LOADING
    ):
        if revision.pk in keep:
            continue
        engine_client.unload_adapter(address, revision.served_name)
        EndpointRevision.objects.filter(pk=revision.pk).update(
            state=EndpointRevision.State.RETIRED, loaded_on_attempt=None
        )


def endpoint_for_job(job_id: int) -> Endpoint | None:
    return Endpoint.objects.filter(job_id=job_id).first()


def sync_all() -> int:
    """The safety net (beat): sync every endpoint whose engine runs; how many."""
    count = 0
    for endpoint_id in (
        Endpoint.objects.exclude(state=Endpoint.State.STOPPED)
        .filter(job__state="running")
        .values_list("pk", flat=True)
    ):
        try:
            endpoint_sync(endpoint_id)
        except (EngineUnavailable, ApiError):
            logger.warning("sync of endpoint %s failed", endpoint_id, exc_info=True)
        count += 1
    return count


def endpoint_request_record(
    *,
    endpoint: Endpoint,
    revision: EndpointRevision,
    api_key: ApiKey,
    path: str,
    **measured: object,
) -> EndpointRequest:
    """One request the proxy answered for `endpoint` (its status, tokens, latency and
    time to first token as `measured`), for the endpoint's page and its usage."""
    return EndpointRequest.objects.create(
        endpoint=endpoint,
        revision=revision,
        organization_id=api_key.organization_id,
        api_key=api_key,
        path=path,
        **measured,
    )
