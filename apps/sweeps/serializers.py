"""The sweeps API's bodies: what a create takes (`SweepCreateIn`) and what every answer
gives (`SweepOut`, with its trials; `SweepSummaryOut` in lists)."""

from __future__ import annotations

from decimal import Decimal

from rest_framework import serializers

from apps.core.money import micros_to_usd
from apps.core.serializers import StrictSerializer
from apps.sweeps.models import Sweep
from apps.sweeps.space import MAX_TRIALS

MAX_CONCURRENCY = 20


class SweepCreateIn(StrictSerializer):
    name = serializers.CharField(max_length=200)
    kind = serializers.ChoiceField(choices=Sweep.Kind.choices, default=Sweep.Kind.FINETUNE)
    template = serializers.DictField(
        help_text="A fine-tune body as POST /projects/{id}/finetunes takes it (kind "
        "`finetune`), or a job body as POST /compute/jobs takes it (kind `container`)."
    )
    method = serializers.ChoiceField(choices=Sweep.Method.choices, default=Sweep.Method.GRID)
    params = serializers.DictField(
        allow_empty=False,
        help_text="Dotted path → list of values (grid or random), or {min, max, log} "
        "(random only).",
    )
    samples = serializers.IntegerField(
        min_value=1, max_value=MAX_TRIALS, required=False, help_text="Random only."
    )
    seed = serializers.IntegerField(required=False, default=0)
    concurrency = serializers.IntegerField(min_value=1, max_value=MAX_CONCURRENCY, default=1)
    max_cost_usd = serializers.DecimalField(
        max_digits=12,
        decimal_places=6,
        min_value=Decimal("0.000001"),
        required=False,
        allow_null=True,
    )
    objective = serializers.CharField(max_length=100, default="loss")
    direction = serializers.ChoiceField(
        choices=Sweep.Direction.choices, default=Sweep.Direction.MINIMIZE
    )


class TrialOut(serializers.Serializer):
    index = serializers.IntegerField()
    values = serializers.DictField()
    state = serializers.CharField(help_text="pending, skipped, error, or the job's state.")
    job_id = serializers.CharField(allow_null=True)
    metric = serializers.FloatField(allow_null=True, help_text="The objective's last value.")
    cost_usd = serializers.FloatField()
    error = serializers.CharField(allow_blank=True)
    best = serializers.BooleanField()


class SweepSummaryOut(serializers.Serializer):
    id = serializers.CharField(source="sweep.public_id")
    object = serializers.SerializerMethodField()
    name = serializers.CharField(source="sweep.name")
    kind = serializers.CharField(source="sweep.kind")
    project = serializers.CharField(source="sweep.project.public_id")
    method = serializers.CharField(source="sweep.method")
    state = serializers.CharField(source="sweep.state")
    stop_reason = serializers.CharField(source="sweep.stop_reason", allow_null=True)
    status = serializers.CharField(source="sweep.status_label")
    concurrency = serializers.IntegerField(source="sweep.concurrency")
    max_cost_usd = serializers.SerializerMethodField()
    objective = serializers.CharField(source="sweep.objective")
    direction = serializers.CharField(source="sweep.direction")
    counts = serializers.DictField(child=serializers.IntegerField())
    cost_usd = serializers.SerializerMethodField()
    best = TrialOut(allow_null=True)
    created_at = serializers.DateTimeField(source="sweep.created_at")
    ended_at = serializers.DateTimeField(source="sweep.ended_at", allow_null=True)

    def get_object(self, view) -> str:
        return "sweep"

    def get_max_cost_usd(self, view) -> float | None:
        return micros_to_usd(view.sweep.max_cost_micros)

    def get_cost_usd(self, view) -> float:
        return micros_to_usd(view.cost_micros)


class SweepOut(SweepSummaryOut):
    template = serializers.DictField(source="sweep.template")
    params = serializers.DictField(source="sweep.params")
    samples = serializers.IntegerField(source="sweep.samples", allow_null=True)
    seed = serializers.IntegerField(source="sweep.seed", allow_null=True)
    trials = TrialOut(many=True)
