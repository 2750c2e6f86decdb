"""Sweeps: one job template run over a grid or a random set of values, a few at a time.

A Sweep holds the template (a fine-tune body as `POST /projects/{id}/finetunes` takes it,
or a container job body as `POST /compute/jobs` takes it), the parameter space, how many
trials may be active at once and an optional cost cap. Each Trial is one set of values;
its job is created only when the scheduler starts it (`apps.sweeps.scheduling`), so a
trial not started yet has no job, and one the cap skipped never gets one.
"""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from apps.accounts.models import ApiKey, Organization, User
from apps.core.ids import new_public_id
from apps.jobs.models import Job
from apps.projects.models import Project


def new_sweep_id() -> str:
    return new_public_id("swp")


class SweepQuerySet(models.QuerySet):
    def for_org(self, organization: Organization) -> SweepQuerySet:
        return self.filter(organization=organization)


class Sweep(models.Model):
    class Kind(models.TextChoices):
        FINETUNE = "finetune"
        CONTAINER = "container"

    class Method(models.TextChoices):
        GRID = "grid"
        RANDOM = "random"

    class State(models.TextChoices):
        RUNNING = "running"
        SUCCEEDED = "succeeded"  # every trial ended (whatever each one's outcome)
        STOPPED = "stopped"  # the cost cap was reached, or a user cancelled it

    class StopReason(models.TextChoices):
        COST_CAP = "cost_cap"
        CANCELLED = "cancelled"

    class Direction(models.TextChoices):
        MINIMIZE = "minimize"
        MAXIMIZE = "maximize"

    public_id = models.CharField(max_length=32, unique=True, default=new_sweep_id, editable=False)
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="+")
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="sweeps")
    created_by = models.ForeignKey(
        User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_by_key = models.ForeignKey(
        ApiKey, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    name = models.CharField(max_length=200)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    template = models.JSONField()
    # {dotted path: [values]} for a grid; for random, a list or {"min", "max", "log"}.
    params = models.JSONField()
    method = models.CharField(max_length=16, choices=Method.choices, default=Method.GRID)
    samples = models.PositiveIntegerField(null=True, blank=True)
    seed = models.BigIntegerField(null=True, blank=True)
    concurrency = models.PositiveSmallIntegerField(default=1)
    max_cost_micros = models.BigIntegerField(null=True, blank=True)
    objective = models.CharField(max_length=100, default="loss")
    direction = models.CharField(
        max_length=16, choices=Direction.choices, default=Direction.MINIMIZE
    )

    state = models.CharField(max_length=16, choices=State.choices, default=State.RUNNING)
    stop_reason = models.CharField(max_length=16, choices=StopReason.choices, null=True, blank=True)
    idempotency_key = models.CharField(max_length=255, null=True, blank=True)
    request_hash = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    ended_at = models.DateTimeField(null=True, blank=True)

    objects = SweepQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["organization", "idempotency_key"],
                condition=models.Q(idempotency_key__isnull=False),
                name="sweep_idempotency_key_per_org",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.public_id} ({self.name})"

    @property
    def status_label(self) -> str:
        """`running`, `succeeded`, or `stopped: cost_cap` — the state and why."""
        return f"{self.state}: {self.stop_reason}" if self.stop_reason else self.state


class Trial(models.Model):
    class State(models.TextChoices):
        PENDING = "pending"  # waiting for a free slot
        STARTED = "started"  # has its job; the job's state says the rest
        SKIPPED = "skipped"  # never started: the sweep stopped first
        ERROR = "error"  # its job could not be created (a budget, a price); see `error`

    sweep = models.ForeignKey(Sweep, on_delete=models.CASCADE, related_name="trials")
    index = models.PositiveIntegerField()
    values = models.JSONField()
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    job = models.OneToOneField(
        Job, null=True, blank=True, on_delete=models.SET_NULL, related_name="sweep_trial"
    )
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["sweep", "index"]
        constraints = [
            models.UniqueConstraint(fields=["sweep", "index"], name="trial_index_per_sweep"),
        ]

    def __str__(self) -> str:
        return f"{self.sweep.public_id}#{self.index}"
