"""Every write that matters to a job: create, transition, terminate, append logs and events.

Rules that hold here:
- `job_transition` (and a `writes.JobWrite` of a caller holding the job's lock) is the only
  writer of `Job.state`: row lock, legality check against `states.TRANSITIONS`, update, a
  `JobEvent`, counters, and a broadcast after commit.
- Multi-row writes run in one transaction; nothing is half-written.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Sum
from django.utils import timezone

from apps.accounts.models import ApiKey, Organization, User
from apps.billing import budgets as billing_budgets
from apps.billing import holds, usage
from apps.core.api_errors import first_validation_error
from apps.core.errors import ApiError, Conflict, InvalidRequest, NotFound, TenantDisabled
from apps.core.transactions import atomic_joining
from apps.jobs import ceilings, enqueue, kinds, states
from apps.jobs.events import JobEventType
from apps.jobs.live import push
from apps.jobs.models import Job, JobCounter, JobEvent, LogLine
from apps.jobs.specs import JobCreateIn, deep_merge, normalise, request_from_spec
from apps.jobs.states import JobState
from apps.jobs.writes import JobWrite, count
from apps.projects.models import Project
from apps.projects.selectors import DEFAULT_PROJECT_SLUG, default_project
from apps.secrets.selectors import validate_secret_env
from apps.workdirs.selectors import validate_workdir_ref


class WaitingJobsLimit(ApiError):
    status_code = 429
    error_type = "waiting_jobs_limit"
    default_detail = "This organization has too many jobs waiting to be placed."


def _check_may_submit(organization: Organization, *, lock: bool = True) -> None:
    """The organization may use compute (TenantDisabled otherwise), and at most
    MAX_WAITING_JOBS_PER_ORG of its jobs wait in `requested`.
    The organization's row is locked, so concurrent submits cannot both take the last
    place; the count comes from the per-state counters, not from counting jobs.

    Row locks here are FOR NO KEY UPDATE (`no_key=True`), as everywhere a row is locked to
    serialise writers rather than to delete it: a plain FOR UPDATE would also block the
    FOR KEY SHARE that every insert referencing the row takes (a dispatch writing a meter
    for the organization), and a submit waiting on that dispatch's counter row deadlocked
    with it."""
    if lock:
        compute_enabled = (
            Organization.objects.select_for_update(no_key=True)
            .filter(pk=organization.pk)
            .values_list("compute_enabled", flat=True)
            .first()
        )
    else:
        compute_enabled = organization.compute_enabled
    # The gate every way in passes (API, New Job form, Playground, endpoint deploy), read
    # from the locked row: an admin switching compute off mid-submit is decided here.
    if not compute_enabled:
        raise TenantDisabled()
    waiting = (
        JobCounter.objects.filter(organization=organization, state=JobState.REQUESTED).aggregate(
            total=Sum("count")
        )["total"]
        or 0
    )
    limit = settings.MAX_WAITING_JOBS_PER_ORG
    if waiting >= limit:
        raise WaitingJobsLimit(
            f"{waiting} jobs of this organization are waiting to be placed (at most {limit}): "
            "wait for some to start, or terminate some."
        )


class IdempotencyConflict(Conflict):
    error_type = "idempotency_conflict"
    default_detail = "This Idempotency-Key was used with a different request body."


def request_hash(payload: object) -> str:
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def validate_job_request(*, organization: Organization, payload: object) -> dict:
    """Validate a job request and return the normalised spec; raises InvalidRequest."""
    if not isinstance(payload, dict):
        raise InvalidRequest("The body must be a JSON object.")
    body = JobCreateIn(data=payload)
    if not body.is_valid():
        param, message = first_validation_error(body.errors)
        raise InvalidRequest(message, param=param)
    spec = normalise(body.validated_data)
    validate_secret_env(organization=organization, secret_env=spec["container"]["secret_env"])
    validate_workdir_ref(organization=organization, workdir_id=spec["container"]["workdir"])
    spec["project"] = body.validated_data.get("project")
    # Kept on the job beside its spec, never part of it (the caller pops it with project).
    spec["job_file"] = body.validated_data.get("job_file")
    return spec


def _project_for(organization: Organization, project_id: str | None) -> Project:
    if project_id:
        project = Project.objects.for_org(organization).filter(public_id=project_id).first()
        if project is None:
            raise NotFound("No such project.")
        return project
    found = default_project(organization)
    if found is not None:
        return found
    project, _ = Project.objects.get_or_create(
        organization=organization,
        slug=DEFAULT_PROJECT_SLUG,
        defaults={
            "name": "Default",
            "description": "Jobs submitted without a project.",
            "is_default": True,
        },
    )
    return project


@dataclass(frozen=True)
class CreatedJob:
    job: Job
    created: bool


def job_create(
    *,
    organization: Organization,
    payload: dict,
    idempotency_key: str | None = None,
    created_by: User | None = None,
    created_by_key: ApiKey | None = None,
    kind: str = Job.Kind.CONTAINER,
    rerun_of: Job | None = None,
) -> CreatedJob:
    """Create a job in `requested` from a request body, or return the job an earlier request
    with the same Idempotency-Key created (`created=False`).

    The same key with a different body raises IdempotencyConflict (409). Two identical
    requests racing each other create one job: the database's unique constraint decides.
    The key is looked up only when the job's INSERT finds it taken, or when the request is
    refused (a replay is answered with its job even if the request would not pass today:
    a secret since deleted, the organization at its waiting limit): the usual submit, a
    new key, pays no look-up.

    The organization's submits take turns from its row lock (the waiting-jobs limit) to
    the commit, so the job, its event and the budget check come before it: the turn is
    the count, the hold and the counter upsert.

    `rerun_of` (a job of the same organization) is the job this one runs again.
    """
    digest = request_hash(payload)
    try:
        job = _create(
            organization,
            payload,
            digest,
            idempotency_key,
            created_by=created_by,
            created_by_key=created_by_key,
            kind=kind,
            rerun_of=rerun_of,
        )
    except IntegrityError:
        if not idempotency_key:
            raise
        existing = _job_for_key(organization, idempotency_key, digest)
        if existing is None:
            raise
        return CreatedJob(existing, created=False)
    except ApiError:
        existing = _job_for_key(organization, idempotency_key, digest) if idempotency_key else None
        if existing is None:
            raise
        return CreatedJob(existing, created=False)
    return CreatedJob(job, created=True)


def _create(
    organization: Organization,
    payload: dict,
    digest: str,
    idempotency_key: str | None,
    *,
    created_by: User | None,
    created_by_key: ApiKey | None,
    kind: str,
    rerun_of: Job | None = None,
) -> Job:
    """Validate the request, then write the job, its event, its hold and its count in one
    transaction; a taken Idempotency-Key raises IntegrityError at the job's INSERT."""
    spec = validate_job_request(organization=organization, payload=payload)
    job_file = spec.pop("job_file") or {}
    project = _project_for(organization, spec.pop("project"))
    hold_micros, first_minute_micros = _pricing(spec)
    with transaction.atomic():
        job = _job_of(organization, project, spec, kind)
        job.created_by = created_by
        job.created_by_key = created_by_key
        job.idempotency_key = idempotency_key or None
        job.request_hash = digest
        job.job_file_name = job_file.get("name", "")
        job.job_file = job_file.get("content", "")
        job.rerun_of = rerun_of
        job.live_seq = 1  # its first write's number: the event below
        job.save(force_insert=True)
        record_event(
            job=job,
            type=JobEventType.JOB_CREATED,
            message=f"Job {job.name!r} requested.",
            data={"state": JobState.REQUESTED},
            state_changed=True,
            seq=job.live_seq,
        )
        billing_budgets.check_create(
            organization_id=organization.pk,
            project_id=project.pk,
            first_minute_micros=first_minute_micros,
        )
        _check_may_submit(organization)
        holds.place_hold(
            organization_id=organization.pk,
            project_id=project.pk,
            job_id=job.pk,
            amount_micros=hold_micros,
            idempotency_key=f"hold:{job.public_id}",
            created_by_id=created_by.pk if created_by else None,
        )
        count(job, None, JobState.REQUESTED)  # last: every submit and placement updates it
        # Robust: if the broker is away, reconcile still finds the job in `requested`.
        enqueue.dispatch_on_commit(job.pk)
    return job


def _job_of(organization: Organization, project: Project | None, spec: dict, kind: str) -> Job:
    """The unsaved Job a validated spec makes (its project popped from the spec)."""
    return Job(
        organization=organization,
        project=project,
        name=spec["name"],
        kind=kind,
        priority_class=spec["priority_class"],
        spec=spec,
        accelerator=spec["compute"]["accelerator"],
        gpu_count=spec["compute"]["gpu_count"],
        ephemeral_disk_gb=spec["compute"]["ephemeral_disk_gb"],
        max_runtime_hours=spec["limits"]["max_runtime_hours"],
        max_cost_micros=spec["limits"]["max_cost_micros"],
        max_price_micros_hr=spec["limits"]["max_price_micros_hr"],
    )


@dataclass(frozen=True)
class PlannedJob:
    job: Job  # unsaved
    hold_micros: int


def job_plan(
    *, organization: Organization, payload: object, kind: str = Job.Kind.CONTAINER
) -> PlannedJob:
    """A dry run of `job_create`: the same checks in the same order, raising the same
    errors (400 invalid request, 404 project, 422 ceilings, 402 budget, 403 compute
    disabled, 429 waiting limit), and the unsaved job it would create. Writes nothing (not
    even the default project) and locks nothing, so a submit a moment later may still be
    refused."""
    spec = validate_job_request(organization=organization, payload=payload)
    spec.pop("job_file")
    project_id = spec.pop("project")
    if project_id:
        project = _project_for(organization, project_id)
    else:
        project = default_project(organization)
    hold_micros, first_minute_micros = _pricing(spec)
    billing_budgets.check_create(
        organization_id=organization.pk,
        project_id=project.pk if project else None,
        first_minute_micros=first_minute_micros,
    )
    _check_may_submit(organization, lock=False)
    return PlannedJob(_job_of(organization, project, spec, kind), hold_micros)


def job_rerun(
    *,
    job: Job,
    overrides: object,
    idempotency_key: str | None,
    created_by: User | None = None,
    created_by_key: ApiKey | None = None,
) -> CreatedJob:
    """Create a job that runs `job` again: the request it was made from (as its kind's
    create endpoint takes it, `JobKind.rerun_request`) with `overrides` deep-merged over it,
    validated as a new request, and linked to `job` (`rerun_of`). The job file is not
    carried over: it described the original. Idempotent by key, as `job_create`."""
    if not isinstance(overrides, dict):
        raise InvalidRequest("The body must be a JSON object of fields to override.")
    hooks = kinds.hooks_for(job)
    if hooks.serves:
        raise InvalidRequest(
            "This job serves an endpoint or the Playground, which starts it again itself; "
            "it cannot be re-run."
        )
    original = hooks.rerun_request(job)
    if original is None:
        original = request_from_spec(job.spec, project_id=job.project.public_id)
    body = deep_merge(original, overrides)
    return job_create(
        organization=job.organization,
        payload=hooks.rerun_payload(job, body),
        idempotency_key=idempotency_key,
        created_by=created_by,
        created_by_key=created_by_key,
        kind=job.kind,
        rerun_of=job,
    )


def hold_for(spec: dict) -> int:
    """What a job of this normalised spec holds at submit (forms show it beside the quote);
    raises BidTooLow for a ceiling no offer that could run it can ever meet, NoPrice when
    nothing prices it."""
    return _pricing(spec)[0]


def _pricing(spec: dict) -> tuple[int, int]:
    """The job's hold at submit, and what its first billed minute costs at the cheapest
    price it could run at (a budget that cannot pay that refuses the job)."""
    compute, limits = spec["compute"], spec["limits"]
    band = ceilings.band_for(
        accelerator=compute["accelerator"],
        gpu_count=compute["gpu_count"],
        priority_class=spec["priority_class"],
    )
    ceilings.check_ceiling(limits["max_price_micros_hr"], band)
    hold = holds.hold_amount(
        ceiling_micros_per_gpu_hr=ceilings.hold_ceiling(
            limits["max_price_micros_hr"], band, accelerator=compute["accelerator"]
        ),
        gpu_count=compute["gpu_count"],
        max_cost_micros=limits["max_cost_micros"],
    )
    cheapest = ceilings.cheapest_price(limits["max_price_micros_hr"], band)
    return hold, usage.cost_micros(1, cheapest * compute["gpu_count"])


def _job_for_key(organization: Organization, key: str, digest: str) -> Job | None:
    job = Job.objects.filter(organization=organization, idempotency_key=key).first()
    if job is not None and job.request_hash != digest:
        raise IdempotencyConflict(param="Idempotency-Key")
    return job


def job_transition(
    *,
    job_id: int,
    to: str,
    reason: str | None = None,
    message: str = "",
    data: dict | None = None,
    exit_code: int | None = None,
    error_message: str | None = None,
) -> Job:
    """Move a job to `to` if the transition table allows it; raise IllegalTransition (and
    change nothing) if it does not. Locks the job's row for the rest of the transaction
    (the caller's, which it joins without a savepoint, when one is open).

    Four statements after the lock: the job's row (its state, and its live sequence number
    for the event's push), the event, and both counter buckets. A caller holding the job's
    lock for more writes does the state change last, so that those shared counter rows are
    held only until its commit; one whose writes go together (events, log lines, several
    hops) makes them one `writes.JobWrite`."""
    with atomic_joining():
        job = (
            Job.objects.select_for_update(of=("self",), no_key=True)
            .select_related("project")
            .get(pk=job_id)
        )
        JobWrite(job).transition(
            to,
            reason=reason,
            message=message,
            data=data,
            exit_code=exit_code,
            error_message=error_message,
        ).save()
    return job


def job_terminate(*, job: Job, reason: str = "cancelled", message: str = "") -> Job:
    """Ask for a job to end. Idempotent: a job already terminating or ended is returned as
    it is, and so is one `finalizing` (its workload has exited; it ends on its own in a
    moment, with its real outcome). A job that holds no hardware ends `terminated` at once;
    one that does goes `terminating`, and `jobs.stop_job` signals its workload as soon as
    this commits (reconcile is the safety net)."""
    with transaction.atomic():
        locked = Job.objects.select_for_update(of=("self",), no_key=True).get(pk=job.pk)
        if locked.is_terminal or locked.state in (JobState.TERMINATING, JobState.FINALIZING):
            return locked
        held_nothing = locked.state in states.NOTHING_TO_RELEASE
        record_event(
            job=locked,
            type=JobEventType.TERMINATE_REQUESTED,
            message=message or "Termination requested.",
            data={"reason": reason},
        )
        locked = job_transition(job_id=locked.pk, to=JobState.TERMINATING, reason=reason)
        if held_nothing:
            locked = job_transition(job_id=locked.pk, to=JobState.TERMINATED, reason=reason)
        else:
            enqueue.stop_on_commit(locked.pk)  # signal the workload now, not on a tick
    return locked


@dataclass(frozen=True)
class LogLineIn:
    timestamp: datetime
    message: str
    source: str = LogLine.Source.USER
    stream: str = LogLine.Stream.STDOUT


def logs_append(*, job: Job, attempt: int, lines: Iterable[LogLineIn]) -> int:
    """Store log lines in bulk and keep the job's per-source line counts in step."""
    rows = [
        LogLine(
            job=job,
            attempt=attempt,
            source=line.source,
            stream=line.stream,
            timestamp=line.timestamp,
            message=line.message,
        )
        for line in lines
    ]
    if not rows:
        return 0
    user = sum(1 for row in rows if row.source == LogLine.Source.USER)
    with atomic_joining():
        created = LogLine.objects.bulk_create(LogLine.objects.place(rows), batch_size=1000)
        seq = push.bump_live_seq(job.pk, user_lines=user, system_lines=len(rows) - user)
        push.push_on_commit(job=job, seq=seq, log_ids=[row.pk for row in created])
    return len(rows)


def system_log(*, job: Job, attempt: int, message: str) -> None:
    """A `source=system` line written by the control plane (allocation, launch, ...)."""
    logs_append(
        job=job,
        attempt=attempt,
        lines=[LogLineIn(timestamp=timezone.now(), message=message, source=LogLine.Source.SYSTEM)],
    )


def record_event(
    *,
    job: Job,
    type: str,
    message: str = "",
    data: dict | None = None,
    attempt: int | None = None,
    state_changed: bool = False,
    seq: int | None = None,
) -> JobEvent:
    """Write a JobEvent and push it (with the job's state, when it changed) to live pages
    after commit. Call inside the write's transaction. `seq`: the live sequence number the
    caller already took for it (`job_transition`, in the same UPDATE as the state)."""
    event = JobEvent.objects.create(
        job=job,
        attempt=attempt if attempt is not None else (job.attempt_count or None),
        type=type,
        message=message,
        data=data or {},
    )
    if seq is None:
        seq = push.bump_live_seq(job.pk)
    push.push_on_commit(job=job, seq=seq, event_ids=[event.id], state_changed=state_changed)
    return event
