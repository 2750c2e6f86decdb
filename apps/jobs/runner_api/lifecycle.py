"""The runner's lifecycle endpoints (docs/runner-protocol.md): its spec, `started`,
heartbeats (whose answers carry orders) and its exit report."""

from __future__ import annotations

from contextlib import suppress

from django.conf import settings
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET, require_POST

from apps.core.errors import InvalidRequest
from apps.jobs.artifacts import store
from apps.jobs.execution import reports
from apps.jobs.execution.attempts import AttemptSuperseded
from apps.jobs.execution.tokens import hub_token_for
from apps.jobs.kinds import WORKDIR_INVALID, hooks_for
from apps.jobs.models import Attempt
from apps.jobs.runner_api.auth import json_body, runner_endpoint
from apps.jobs.runner_api.workdirs import job_workdir, job_workdir_id, spec_workdir
from apps.jobs.telemetry.masking import remember_mask_values
from apps.secrets.selectors import SecretEnvUndecryptable, resolve_secret_env
from runner import protocol

# Exit codes and steps are stored in PostgreSQL `integer` columns.
MIN_INTEGER, MAX_INTEGER = -(2**31), 2**31 - 1


def _whole(value: object, low: int, high: int) -> bool:
    """Whether `value` is a whole number (not a bool) from `low` to `high`."""
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _hub_access(attempt: Attempt, user_env: dict[str, str]) -> tuple[dict | None, dict]:
    """What the workload gets of a Hugging Face hub: the spec's `hub` (where the runner
    finds this control plane's hub, which it turns into HF_ENDPOINT: its own control URL,
    or a door on the workload's loopback when it talks through a socket) and the env to add.

    With TRAINYARD_HF_ENDPOINT set, that hub is the workload's, and no token is made for it.
    Otherwise HF_TOKEN is the attempt's hub token (it reads the organization's repositories
    until the attempt ends), unless the job gives its own HF_TOKEN, which wins; and
    TRAINYARD_HUB_NAMESPACE names the organization, whose repositories this hub holds."""
    if settings.TRAINYARD_HF_ENDPOINT:
        return None, {"HF_ENDPOINT": settings.TRAINYARD_HF_ENDPOINT}
    env = {protocol.ENV_HUB_NAMESPACE: attempt.job.organization.slug}
    if "HF_TOKEN" not in user_env:
        env["HF_TOKEN"] = hub_token_for(attempt.token_nonce)
    return {"path": protocol.HUB_PATH}, env


@require_GET
@runner_endpoint
def spec(request: HttpRequest, attempt: Attempt) -> JsonResponse:
    job = attempt.job
    if attempt.ended_at is not None or attempt.number != job.attempt_count:
        raise AttemptSuperseded(attempt.pk)
    container = job.spec["container"]
    secret_env = container.get("secret_env") or {}
    try:
        secret_values = resolve_secret_env(organization=job.organization, secret_env=secret_env)
    except InvalidRequest as exc:
        # A secret or key it names was deleted since: permanent. The job fails now, and the
        # 409 stops the runner (exit 0) before any workload starts.
        reports.secret_env_unresolvable(attempt.pk, secret_env, exc)
        raise AttemptSuperseded(attempt.pk) from exc
    except SecretEnvUndecryptable as exc:
        # SECRETS_KEYS lost the secret's key: as permanent as a deleted secret, and said
        # once in the job's reason instead of a traceback at every retry.
        reports.secret_env_undecryptable(attempt.pk, exc)
        raise AttemptSuperseded(attempt.pk) from exc
    mask = [value for value in secret_values.values() if value]
    hub, hub_env = _hub_access(attempt, {**container.get("env", {}), **secret_values})
    mask += [value for name, value in hub_env.items() if name == "HF_TOKEN"]
    # Before the values leave: ingestion masks them in this job's lines from now on, even
    # after their secret is deleted.
    remember_mask_values(attempt, mask)
    workdir = job_workdir(job)
    if job_workdir_id(job) is not None and workdir is None:
        # The archive is gone (deleted with its organization's data): permanent.
        reports.spec_unservable(
            attempt.pk,
            reason=WORKDIR_INVALID,
            message=(
                f"The job cannot run: its workdir archive {job_workdir_id(job)!r} is gone. "
                "Upload it again and submit the job again."
            ),
            data={"workdir": job_workdir_id(job)},
        )
        raise AttemptSuperseded(attempt.pk)
    inputs, env_for_runner = hooks_for(job).runner_inputs(job)
    env = {**container.get("env", {}), **env_for_runner, **secret_values}
    env.update(
        {
            protocol.ENV_JOB_ID: job.public_id,
            protocol.ENV_ATTEMPT: str(attempt.number),
            protocol.ENV_CHECKPOINT_DIR: "checkpoints",
            protocol.ENV_RESUME_FROM: "",
        }
    )
    env.update(hub_env)
    return JsonResponse(
        {
            "protocol_version": protocol.PROTOCOL_VERSION,
            "job_id": job.public_id,
            "attempt": attempt.number,
            "command": container.get("command"),
            "script_b64": container.get("script_b64"),
            "env": env,
            "mask": mask,
            "heartbeat_interval_s": settings.HEARTBEAT_INTERVAL_S,
            "log_batch_max_lines": settings.LOG_BATCH_MAX_LINES,
            "log_batch_max_interval_s": settings.LOG_BATCH_MAX_INTERVAL_S,
            "log_gzip_min_bytes": (
                settings.LOG_GZIP_MIN_BYTES if settings.LOG_GZIP_MIN_BYTES >= 0 else None
            ),
            "terminate_grace_s": settings.TERMINATE_GRACE_S,
            "final_flush_timeout_s": 600,
            "resume_from": store.resume_from(job),
            "inputs": inputs,
            "workdir": spec_workdir(workdir, job) if workdir is not None else None,
            "files": dict(container.get("files") or {}),
            "hub": hub,
        }
    )


@require_POST
@runner_endpoint
def started(request: HttpRequest, attempt: Attempt) -> JsonResponse:
    body = json_body(request)
    step = body.get("resumed_from_step") if isinstance(body, dict) else None
    if step is not None and not _whole(step, 0, MAX_INTEGER):
        raise InvalidRequest(
            f"resumed_from_step must be a whole number from 0 to {MAX_INTEGER}.",
            param="resumed_from_step",
        )
    order = reports.runner_started(attempt.pk, step)
    return JsonResponse({"order": order, **reports.shell_hint(attempt)})


@require_POST
@runner_endpoint
def heartbeat(request: HttpRequest, attempt: Attempt) -> JsonResponse:
    # The attempt and its job are loaded already (authentication): the beat is one UPDATE.
    order = reports.runner_heartbeat(attempt)
    return JsonResponse({"order": order, **reports.shell_hint(attempt)})


@require_POST
@runner_endpoint
def exit_(request: HttpRequest, attempt: Attempt) -> JsonResponse:
    body = json_body(request)
    code = body.get("exit_code") if isinstance(body, dict) else None
    if not _whole(code, MIN_INTEGER, MAX_INTEGER):
        raise InvalidRequest(
            f"exit_code must be a whole number from {MIN_INTEGER} to {MAX_INTEGER}.",
            param="exit_code",
        )
    # A late report of an old attempt has nothing left to do, and nothing to undo.
    if attempt.ended_at is None:
        with suppress(AttemptSuperseded):
            reports.runner_exited(attempt.pk, code)
    return JsonResponse({"ok": True})
