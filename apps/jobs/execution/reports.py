"""Runner reports: what the runner tells the control plane about its attempt (started,
heartbeats, exited) and a spec it cannot be given. The backend's side (polls, a workload lost,
the end of the job) is `apps.jobs.execution.supervision`.

Either side may be first or be missing: every function here checks the job's state under its
row lock and only takes the step that is still due, so reports that arrive twice, late or out
of order change nothing. A heartbeat is one UPDATE (`runner_heartbeat`); a relay's bundle of
them is one UPDATE too (`runner_heartbeats`).
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import suppress
from datetime import timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from apps.core.errors import InvalidRequest
from apps.jobs import enqueue, services
from apps.jobs.events import JobEventType
from apps.jobs.execution import preemption
from apps.jobs.execution.attempts import (
    AttemptSuperseded,
    end_attempt,
    lock_current,
    start_billing,
)
from apps.jobs.models import Attempt, Job
from apps.jobs.states import JobState
from apps.jobs.writes import JobWrite
from apps.providers.backends import allocates_at_launch
from apps.secrets.selectors import SECRET_ENV_PARAM, SecretEnvUndecryptable
from runner import protocol

# Reasons of a job whose spec cannot be served, now or ever.
SECRET_MISSING = "secret_missing"
SECRET_UNDECRYPTABLE = "secret_undecryptable"
SPEC_INVALID = "spec_invalid"
# States in which a runner may ask for its spec and the job may still fail for it.
SPEC_FAILABLE = (JobState.ALLOCATING, JobState.PROVISIONING, JobState.RUNNING)


def order_for(job: Job, attempt: Attempt) -> str:
    """The order a runner's heartbeat answer carries."""
    if attempt.ended_at is not None or job.state == JobState.TERMINATING:
        return protocol.ORDER_TERMINATE
    if attempt.preempt_requested_at is not None:
        return protocol.ORDER_CHECKPOINT_AND_EXIT
    return protocol.ORDER_CONTINUE


# The runner's answers carry the shell hint this long after a session was last asked for:
# the runner keeps taking sessions meanwhile (runner.protocol, "shell sessions").
SHELL_HINT_S = 120.0


def shell_hint(attempt: Attempt) -> dict:
    """`{"shell": True}` for a runner answer while sessions into its attempt are wanted,
    else {}. From the attempt as loaded: no query."""
    wanted = attempt.shell_wanted_at
    if wanted is None or timezone.now() - wanted > timedelta(seconds=SHELL_HINT_S):
        return {}
    return {protocol.SHELL_ANSWER_KEY: True}


def runner_started(attempt_id: int, resumed_from_step: int | None = None) -> str:
    """The runner started the workload (`resumed_from_step`: the checkpoint step it
    resumes from, None when it starts from the beginning)."""
    with transaction.atomic():
        job, attempt = lock_current(attempt_id)
        if attempt.ended_at is not None:
            raise AttemptSuperseded(attempt.pk)
        write = JobWrite(job)  # its events and the state change: one write, one push
        if attempt.started_at is None:
            attempt.started_at = timezone.now()
            attempt.last_heartbeat_at = attempt.started_at
            attempt.save(update_fields=["started_at", "last_heartbeat_at"])
            start_billing(job, attempt, attempt.started_at)
            write.event(
                attempt=attempt.number,
                type=JobEventType.WORKLOAD_STARTED,
                message="The workload started.",
            )
            preemption.record_resume(write, attempt, resumed_from_step)
        if job.state == JobState.PROVISIONING:
            write.transition(JobState.RUNNING)
        if write.changes_anything:
            write.save()
        return order_for(job, attempt)


def runner_heartbeat(attempt: Attempt | int) -> str:
    """Record the runner's heartbeat and answer its order. `attempt` is the attempt with its
    job loaded (the runner endpoint has both from authenticating the token), or its id.

    One UPDATE, whose WHERE is the check: the attempt is still live (`ended_at` is null) and
    still the job's current one (its number is the job's `attempt_count`). When it is not,
    nothing is written and AttemptSuperseded is raised (the runner's 409). The order comes
    from the job and attempt as loaded (`order_for`)."""
    if not isinstance(attempt, Attempt):
        attempt = Attempt.objects.select_related("job").get(pk=attempt)
    beat = Attempt.objects.filter(
        pk=attempt.pk, ended_at__isnull=True, number=F("job__attempt_count")
    ).update(last_heartbeat_at=timezone.now())
    if not beat:
        raise AttemptSuperseded(attempt.pk)
    return order_for(attempt.job, attempt)


def runner_heard(attempt: Attempt) -> None:
    """A runner request other than a heartbeat (a log batch) was served: the runner is
    alive, and that counts as a heartbeat. Written at most once per HEARTBEAT_INTERVAL_S
    (`attempt` as loaded for the request says when the last one was), so a runner posting
    a batch a second costs one UPDATE every few seconds, not one per batch.

    Under load the log batches, many more than heartbeats, could crowd the heartbeats out
    (each request may wait its turn, `config/admission.py`) until a healthy runner was
    declared silent and its attempt lost; a stored batch proves it alive all the same."""
    runners_heard([attempt])


def runner_heartbeats(attempts: list[Attempt]) -> set[int]:
    """`runner_heartbeat` for many attempts (a relay's bundle) in one UPDATE: the ids of
    those still live and current, whose beat was recorded. The others' runners get 409."""
    if not attempts:
        return set()
    if connection.vendor != "postgresql":  # SQLite (`make run`): one by one
        live = set()
        for attempt in attempts:
            with suppress(AttemptSuperseded):
                runner_heartbeat(attempt)
                live.add(attempt.pk)
        return live
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {Attempt._meta.db_table} AS a SET last_heartbeat_at = %s "
            f"FROM {Job._meta.db_table} AS j WHERE a.id = ANY(%s) AND j.id = a.job_id "
            "AND a.ended_at IS NULL AND a.number = j.attempt_count RETURNING a.id",
            [timezone.now(), [attempt.pk for attempt in attempts]],
        )
        ids = {row[0] for row in cursor.fetchall()}
    return ids


def runners_heard(attempts: list[Attempt]) -> None:
    """`runner_heard` for many attempts (a relay's bundle), in one UPDATE of those due."""
    now = timezone.now()
    interval = timedelta(seconds=settings.HEARTBEAT_INTERVAL_S)
    due = [
        attempt
        for attempt in attempts
        if attempt.ended_at is None
        and (attempt.last_heartbeat_at is None or now - attempt.last_heartbeat_at >= interval)
    ]
    if not due:
        return
    Attempt.objects.filter(pk__in=[attempt.pk for attempt in due], ended_at__isnull=True).update(
        last_heartbeat_at=now
    )
    for attempt in due:
        attempt.last_heartbeat_at = now


# How a workload ends when its scheduler preempts it: SIGTERM, or SIGKILL when it did not
# stop within the runner's grace (shorter than the scheduler's, or a slow checkpoint).
_SCHEDULER_STOPS = frozenset({protocol.EXIT_SIGTERM, protocol.EXIT_SIGKILL})


def _may_be_a_reclaim(job: Job, attempt: Attempt) -> bool:
    return (
        attempt.exit_code in _SCHEDULER_STOPS
        and job.state != JobState.TERMINATING
        and not allocates_at_launch(attempt.provider)
    )


def runner_exited(attempt_id: int, exit_code: int, *, confirmed: bool = False) -> None:
    """Record the workload's exit code (from the runner or the backend's poll) and move the
    job on: to `preempted` when the attempt was displaced or reclaimed, else towards its
    final state, which `finalize` sets after releasing the hardware.

    A batch scheduler (Slurm) preempts by SIGTERM, so a runner's own report of exit 143 on
    such a provider may be a reclaim nobody here asked for, and so may 137 (the runner's
    SIGKILL after its grace, when the workload took longer to stop): the job then waits for
    the backend's next poll (`confirmed=True`), which tells a reclaim from the workload's
    own exit."""
    with transaction.atomic():
        job, attempt = lock_current(attempt_id)
        if attempt.ended_at is not None:
            return
        if attempt.exit_code is None:
            attempt.exit_code = exit_code
            attempt.save(update_fields=["exit_code"])
            services.record_event(
                job=job,
                attempt=attempt.number,
                type=JobEventType.WORKLOAD_EXITED,
                message=f"The workload exited with code {exit_code}.",
                data={"exit_code": exit_code},
            )
        reason = preemption.preemption_reason(job, attempt, attempt.exit_code)
        if reason is not None:
            preemption.preempt(job, attempt, reason=reason)
            return
        if not confirmed and _may_be_a_reclaim(job, attempt):
            return
        if job.state == JobState.PROVISIONING:
            job = services.job_transition(job_id=job.pk, to=JobState.RUNNING)
        if job.state == JobState.RUNNING:
            services.job_transition(job_id=job.pk, to=JobState.FINALIZING)
        enqueue.finalize_on_commit(job.pk)


def spec_unservable(attempt_id: int, *, reason: str, message: str, data: dict) -> None:
    """The attempt's spec cannot be served and never will be (a secret it names was deleted):
    fail the job now, with a system line and the state change saying why, instead of leaving
    a runner without a spec to be declared lost and placed again and again. `message` and
    `data` must hold no secret value. Raises AttemptSuperseded when the attempt is no longer
    the job's live one; a job being terminated is left to end that way."""
    with transaction.atomic():
        job, attempt = lock_current(attempt_id)
        if attempt.ended_at is not None:
            raise AttemptSuperseded(attempt.pk)
        if job.state not in SPEC_FAILABLE:
            return
        services.system_log(job=job, attempt=attempt.number, message=message)
        end_attempt(attempt, reason=reason)
        if job.state == JobState.RUNNING:
            job = services.job_transition(job_id=job.pk, to=JobState.FINALIZING)
        services.job_transition(
            job_id=job.pk,
            to=JobState.FAILED,
            reason=reason,
            message=message,
            data=data,
            error_message=message,
        )


def secret_env_unresolvable(attempt_id: int, secret_env: object, error: InvalidRequest) -> None:
    """`resolve_secret_env` refused the job's `secret_env` (`error` names the entry in its
    param): a secret or key the job names is gone. Fail the job `secret_missing`, naming the
    variable, the secret and the key (never a value); `spec_invalid` when the entry cannot
    be told."""
    prefix = f"{SECRET_ENV_PARAM}."
    env_name = (error.param or "").removeprefix(prefix)
    ref = secret_env.get(env_name) if isinstance(secret_env, Mapping) else None
    if (error.param or "").startswith(prefix) and isinstance(ref, Mapping):
        secret_id, key = ref.get("secret_id"), ref.get("key")
        message = (
            f"The job cannot run: {env_name} comes from key {key!r} of secret {secret_id!r}, "
            f"which is gone ({error.detail}). Submit the job again with a secret that exists."
        )
        data = {"env": env_name, "secret_id": secret_id, "key": key}
        spec_unservable(attempt_id, reason=SECRET_MISSING, message=message, data=data)
        return
    message = f"The job cannot run: its spec cannot be served ({error.detail})."
    spec_unservable(attempt_id, reason=SPEC_INVALID, message=message, data={})


def secret_env_undecryptable(attempt_id: int, error: SecretEnvUndecryptable) -> None:
    """No key of SECRETS_KEYS opens a secret the job's `secret_env` names (an operator dropped
    its key before `rotate_secrets` re-encrypted it): no later attempt could do better, so
    fail the job `secret_undecryptable`, naming the variable, the secret and the key (never
    a value)."""
    message = (
        f"The job cannot run: {error.env_name} comes from key {error.key!r} of secret "
        f"{error.secret_name!r} ({error.secret_id}), which no key in the control plane's "
        "SECRETS_KEYS decrypts. An operator must restore the key it was encrypted with "
        "(and run rotate_secrets), or the secret must be written again; then submit the job "
        "again."
    )
    data = {
        "env": error.env_name,
        "secret_id": error.secret_id,
        "secret_name": error.secret_name,
        "key": error.key,
    }
    spec_unservable(attempt_id, reason=SECRET_UNDECRYPTABLE, message=message, data=data)
