"""Every write of the Playground: its servers (one serve job per organization and base model),
the adapters loaded on them on demand, and the idle stop.

How a Playground server lives:
1. The first page or chat that needs a base model calls `server_for`: the organization's
   server row for that base (created once: a unique constraint and a row lock make two
   concurrent first calls start one serve job), with a serve job started when it has none
   or its job ended.
2. The engine starts like any serve job; when it announces its port the worker runs
   `playground.server_ready`, which marks the server used (its idle window starts then).
3. A chat with an artifact calls `ensure_adapter`: the artifact is uploaded and loaded
   under `pg-<artifact pk>` unless the engine's current attempt has it; past MAX_ADAPTERS
   the least recently used are unloaded first.
4. Beat runs `playground.stop_idle`: a server unused for `settings.PLAYGROUND_IDLE_S` has
   its job terminated. Its next use starts a new one.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from apps.accounts.models import Organization, User
from apps.core.errors import ApiError, TenantDisabled
from apps.core.locks import redis_lock
from apps.hub.models import HubCommit
from apps.jobs import services as job_services
from apps.jobs.models import Artifact, Job
from apps.jobs.states import TERMINAL_STATES, JobState
from apps.playground.models import PlaygroundAdapter, PlaygroundServer, served_name_for
from apps.projects.models import Project
from apps.serving import adapters, engine_client, payloads
from apps.serving.engine_client import EngineAddress

logger = logging.getLogger(__name__)

# Adapters one Playground engine holds at once; the least recently used go first. A
# constant, not a setting: it is what the engine's memory for adapters is sized for.
MAX_ADAPTERS = 6
LOAD_LOCK_S = 300
JOB_NAME_MAX = 200
ENDED = frozenset({*TERMINAL_STATES, JobState.TERMINATING})


class ServerStarting(ApiError):
    """The server's engine is not up yet (placing, starting, or coming back)."""

    status_code = 503
    error_type = "playground_starting"
    default_detail = "The Playground server is starting; try again in a few seconds."


def _job_ended(job: Job | None) -> bool:
    return job is None or job.state in ENDED


class StartNotAllowed(ApiError):
    status_code = 403
    error_type = "permission_denied"
    default_detail = (
        "The Playground server is not running, and a viewer may not start one (it is a billed "
        "job): ask a member of the organization to open the Playground."
    )


def server_for(
    *,
    organization: Organization,
    project: Project,
    base_model: str,
    user: User | None,
    may_start: bool = True,
) -> PlaygroundServer:
    """The organization's Playground server for `base_model`, with a live serve job: one is
    started (in `project`, by `user`) when the server has none or its job ended.

    Idempotent under concurrency: the row is created once (the unique constraint decides a
    race; the loser reads the winner's row) and the start happens under its row lock, so
    two first calls at once start one job. Raises TenantDisabled for an organization
    without compute, StartNotAllowed when a start is needed and `may_start` is False (a
    viewer: starting is a billed write), and job_create's errors (a budget, the
    waiting-jobs limit)."""
    # Also checked here, not only by job_create: without compute a running server is not
    # used either.
    if not organization.compute_enabled:
        raise TenantDisabled()
    base_model = base_model.strip()
    with transaction.atomic():
        server, _ = PlaygroundServer.objects.get_or_create(
            organization=organization, base_model=base_model, defaults={"started_by": user}
        )
        server = (
            PlaygroundServer.objects.select_for_update(of=("self",), no_key=True)
            .select_related("job")
            .get(pk=server.pk)
        )
        if not _job_ended(server.job):
            return server
        if not may_start:
            raise StartNotAllowed()
        created = job_services.job_create(
            organization=organization,
            payload=payloads.serve_job_payload(
                name=f"playground {base_model}"[:JOB_NAME_MAX],
                project_id=project.public_id,
                base_model=base_model,
                serves_for=payloads.PLAYGROUND,
            ),
            created_by=user,
            kind=Job.Kind.SERVE,
        )
        server.job = created.job
        server.started_by = user
        server.last_used_at = timezone.now()
        server.save(update_fields=["job", "started_by", "last_used_at"])
        # Attempt numbers count again from 1 in the new job: nothing is loaded there.
        server.adapters.update(loaded_on_attempt=None)
    logger.info("playground server %s for %r started job %s", server.pk, base_model, server.job)
    return server


def engine_for(server: PlaygroundServer) -> EngineAddress | None:
    """Where the server's engine answers now; None while it starts (or when it stopped)."""
    job = Job.objects.filter(pk=server.job_id).first() if server.job_id else None
    return engine_client.address_for(job)


def server_state(server: PlaygroundServer | None) -> str:
    """`ready` (its engine answers), `starting`, or `stopped` (no job, or it ended)."""
    if server is None:
        return "stopped"
    job = Job.objects.filter(pk=server.job_id).first() if server.job_id else None
    if _job_ended(job):
        return "stopped"
    return "ready" if engine_client.address_for(job) is not None else "starting"


def touch(server: PlaygroundServer) -> None:
    """The server was used now: its idle window starts again."""
    PlaygroundServer.objects.filter(pk=server.pk).update(last_used_at=timezone.now())


def server_ready(job_id: int) -> None:
    """The serve job `job_id`'s engine announced its port. Adapters load on demand, so
    there is nothing to load: the server counts as used from now (a slow start does not eat
    its idle window)."""
    server = PlaygroundServer.objects.filter(job_id=job_id).first()
    if server is None:
        logger.info("serve job %s is no Playground server's (any more)", job_id)
        return
    touch(server)
    logger.info("playground server %s (%r) is ready", server.pk, server.base_model)


def ensure_adapter(
    server: PlaygroundServer,
    artifact: Artifact | None = None,
    *,
    hub_commit: HubCommit | None = None,
    reload: bool = False,
) -> str:
    """The served name under which the server's engine has the adapter now — `artifact`,
    or the adapter at `hub_commit` of the organization's hub — uploading and loading it when
    its current attempt lacks it (`reload`: even when it is marked loaded, after the engine
    answered that it does not know the name). Beyond MAX_ADAPTERS the least recently used
    are unloaded first.

    Raises ServerStarting when the engine is not up, EngineUnavailable and EngineRefused
    from the engine."""
    source = {"hub_commit": hub_commit} if hub_commit is not None else {"artifact": artifact}
    adapter, _ = PlaygroundAdapter.objects.get_or_create(
        server=server,
        **source,
        defaults={"served_name": served_name_for(artifact=artifact, hub_commit=hub_commit)},
    )
    address = engine_for(server)
    if address is None:
        raise ServerStarting()
    if reload or adapter.loaded_on_attempt != address.attempt:
        with redis_lock(f"trainyard:playground:load:{server.pk}", LOAD_LOCK_S):
            adapter.refresh_from_db()
            address = engine_for(server)
            if address is None:
                raise ServerStarting()
            if reload or adapter.loaded_on_attempt != address.attempt:
                _make_room(server, address, keep=adapter)
                with adapters.archive_of(adapter) as archive:
                    engine_client.load_adapter(address, adapter.served_name, archive)
                # Only while the server still runs the job whose engine was loaded: a
                # restart meanwhile (server_for) cleared the marks for its new job.
                PlaygroundAdapter.objects.filter(
                    pk=adapter.pk, server__job_id=server.job_id
                ).update(loaded_on_attempt=address.attempt)
    PlaygroundAdapter.objects.filter(pk=adapter.pk).update(last_used_at=timezone.now())
    return adapter.served_name


def _make_room(server: PlaygroundServer, address: EngineAddress, *, keep: PlaygroundAdapter):
    """Unload the least recently used adapters so that `keep` makes at most MAX_ADAPTERS.
    Call under the server's load lock. The engine lets requests in flight on an unloaded
    name finish; one that arrives later is answered 404 and the run loads it again."""
    loaded = list(
        server.adapters.filter(loaded_on_attempt=address.attempt)
        .exclude(pk=keep.pk)
        .order_by("-last_used_at", "-pk")
    )
    for adapter in loaded[MAX_ADAPTERS - 1 :]:
        engine_client.unload_adapter(address, adapter.served_name)
        PlaygroundAdapter.objects.filter(pk=adapter.pk).update(loaded_on_attempt=None)


def stop_idle() -> int:
    """Terminate the serve jobs of servers unused for `settings.PLAYGROUND_IDLE_S`; how
    many. A server used while this runs keeps its job: the check is made again under its
    row lock, which `touch` (an UPDATE of the row) waits for."""
    cutoff = timezone.now() - timedelta(seconds=settings.PLAYGROUND_IDLE_S)
    stopped = 0
    idle = (
        PlaygroundServer.objects.filter(last_used_at__lt=cutoff, job__isnull=False)
        .exclude(job__state__in=ENDED)
        .values_list("pk", flat=True)
    )
    for server_id in idle:
        with transaction.atomic():
            server = (
                PlaygroundServer.objects.select_for_update(of=("self",), no_key=True)
                .select_related("job")
                .get(pk=server_id)
            )
            if server.last_used_at >= cutoff or _job_ended(server.job):
                continue
            job_services.job_terminate(
                job=server.job,
                reason="idle",
                message=f"The Playground server was idle for {settings.PLAYGROUND_IDLE_S:g}s.",
            )
            server.adapters.update(loaded_on_attempt=None)
            stopped += 1
    return stopped
