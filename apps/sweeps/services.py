"""Creating and cancelling sweeps. Moving a running sweep on is `scheduling.advance`.

`sweep_create` checks everything before it writes anything: the body, each parameter's
shape, the template alone (an error names `template.<field>`), then the template with each
value of each parameter (an error names `params.<path>` and the value), all with the
API's own validation of a fine-tune or job request. Only then are the sweep and all its
trials written, in one transaction, and the first `concurrency` trials started.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import IntegrityError, transaction

from apps.accounts.models import ApiKey, Organization, User
from apps.core.api import validated
from apps.core.errors import ApiError, Conflict, InvalidRequest
from apps.core.money import usd_to_micros
from apps.jobs import services as job_services
from apps.projects.models import Project
from apps.sweeps import scheduling, space, trials
from apps.sweeps.models import Sweep, Trial
from apps.sweeps.serializers import SweepCreateIn


class SweepIdempotencyConflict(Conflict):
    error_type = "idempotency_conflict"
    default_detail = "This Idempotency-Key was used for another sweep."


@dataclass(frozen=True)
class CreatedSweep:
    sweep: Sweep
    created: bool


def sweep_create(
    *,
    organization: Organization,
    project: Project,
    body: object,
    created_by: User | None = None,
    created_by_key: ApiKey | None = None,
    idempotency_key: str | None = None,
) -> CreatedSweep:
    """Validate and store a sweep with its trials, then start the first ones. With an
    `idempotency_key` already used in the organization, the sweep it made (`created=False`;
    a different request body under it is a 409)."""
    if idempotency_key:
        existing = _sweep_for_key(organization, idempotency_key, body)
        if existing is not None:
            return CreatedSweep(existing, created=False)
    data = validated(SweepCreateIn, body)
    values = _trial_values(data)
    _check_template(data, project=project, organization=organization)
    try:
        with transaction.atomic():
            sweep = Sweep.objects.create(
                organization=organization,
                project=project,
                created_by=created_by,
                created_by_key=created_by_key,
                name=data["name"],
                kind=data["kind"],
                template=data["template"],
                params=data["params"],
                method=data["method"],
                samples=data.get("samples"),
                seed=data["seed"] if data["method"] == Sweep.Method.RANDOM else None,
                concurrency=data["concurrency"],
                max_cost_micros=usd_to_micros(data.get("max_cost_usd")),
                objective=data["objective"],
                direction=data["direction"],
                idempotency_key=idempotency_key or None,
                request_hash=job_services.request_hash(body),
            )
            Trial.objects.bulk_create(
                Trial(sweep=sweep, index=index, values=trial_values)
                for index, trial_values in enumerate(values)
            )
    except IntegrityError:  # the same key raced us: theirs won
        existing = _sweep_for_key(organization, idempotency_key, body) if idempotency_key else None
        if existing is None:
            raise
        return CreatedSweep(existing, created=False)
    # Outside the create's transaction: the sweep stands even if starting a trial fails
    # (the beat pass starts it then).
    scheduling.advance(sweep.pk)
    sweep.refresh_from_db()
    return CreatedSweep(sweep, created=True)


def sweep_cancel(*, sweep: Sweep) -> Sweep:
    """Stop a running sweep: its active trials are terminated, its pending ones skipped.
    Idempotent."""
    scheduling.cancel(sweep.pk)
    sweep.refresh_from_db()
    return sweep


def _sweep_for_key(organization: Organization, key: str, body: object) -> Sweep | None:
    sweep = Sweep.objects.for_org(organization).filter(idempotency_key=key).first()
    if sweep is None:
        return None
    if sweep.request_hash != job_services.request_hash(body):
        raise SweepIdempotencyConflict(param="Idempotency-Key")
    return sweep


def _trial_values(data: dict) -> list[dict]:
    params, method = data["params"], data["method"]
    for path, spec in params.items():
        space.check_param(path, spec, method=method)
    if method == Sweep.Method.GRID:
        size = space.grid_size(params)
        if size > space.MAX_TRIALS:
            raise InvalidRequest(
                f"The grid has {size} trials; a sweep has at most {space.MAX_TRIALS}.",
                param="params",
            )
    elif "samples" not in data:
        raise InvalidRequest("A random sweep needs `samples`.", param="samples")
    return space.expand(params, method=method, samples=data.get("samples"), seed=data["seed"])


def _check_template(data: dict, *, project: Project, organization: Organization) -> None:
    """The template passes alone, and with every value of every parameter set in it."""
    kind, template = data["kind"], data["template"]
    try:
        spec = trials.validate(kind=kind, body=template, project=project, organization=organization)
        job_services.hold_for(spec)  # a price ceiling no offer can meet is refused now
    except ApiError as error:
        error.param = f"template.{error.param}" if error.param else "template"
        raise
    for path, spec_values in data["params"].items():
        for value in space.edge_values(spec_values):
            body = space.apply(template, {path: value})
            try:
                trials.validate(kind=kind, body=body, project=project, organization=organization)
            except InvalidRequest as error:
                raise InvalidRequest(
                    f"{value!r} is not a valid {path}: {error.detail}", param=f"params.{path}"
                ) from None
