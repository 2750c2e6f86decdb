"""`GET /api/v1/compute/jobs/compare?ids=job_a,job_b`: 2 to 10 jobs side by side — each
one's configuration, metric summaries, cost and duration, and the configuration keys whose
values differ between them (`apps.jobs.comparison`)."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from apps.accounts.permissions import caller
from apps.core.money import micros_to_usd
from apps.jobs import comparison
from apps.jobs.api.jobs import ComputeView
from apps.jobs.states import JobState


class MetricSummaryOut(serializers.Serializer):
    final = serializers.FloatField(allow_null=True, help_text="the latest point's value")
    final_step = serializers.IntegerField()
    best = serializers.FloatField(
        allow_null=True,
        help_text="the lowest finite value, the highest where goal is max; null where goal is",
    )
    goal = serializers.ChoiceField(
        choices=["min", "max"],
        allow_null=True,
        help_text="which way is better; null for a schedule (epoch, learning_rate, grad_norm)",
    )
    points = serializers.IntegerField()


class ComparedJobOut(serializers.Serializer):
    id = serializers.CharField(source="job.public_id")
    name = serializers.CharField(source="job.name")
    kind = serializers.CharField(source="job.kind")
    project = serializers.CharField(source="job.project.public_id")
    state = serializers.ChoiceField(source="job.state", choices=JobState.choices)
    reason = serializers.CharField(source="job.reason", allow_null=True)
    config = serializers.DictField(
        help_text="the spec as dotted keys (without `name`; a fine-tune's trainer config as "
        "`training.*`)"
    )
    metrics = serializers.DictField(child=MetricSummaryOut())
    accrued_usd = serializers.SerializerMethodField()
    duration_s = serializers.FloatField(allow_null=True)
    created_at = serializers.DateTimeField(source="job.created_at")
    started_at = serializers.DateTimeField(source="job.started_at", allow_null=True)
    terminal_at = serializers.DateTimeField(source="job.terminal_at", allow_null=True)

    def get_accrued_usd(self, compared: comparison.ComparedJob) -> float:
        return micros_to_usd(compared.job.accrued_micros)


class CompareOut(serializers.Serializer):
    jobs = ComparedJobOut(many=True)
    differences = serializers.DictField(
        child=serializers.DictField(),
        help_text="dotted key → {job id: value}, only the keys whose values differ",
    )
    metric_names = serializers.ListField(child=serializers.CharField())


class JobCompareView(ComputeView):
    @extend_schema(
        responses=CompareOut,
        parameters=[
            OpenApiParameter(
                "ids",
                OpenApiTypes.STR,
                required=True,
                description=f"{comparison.MIN_JOBS} to {comparison.MAX_JOBS} job ids, "
                "comma-separated (or the parameter repeated)",
            )
        ],
        summary="Compare jobs: configuration differences, final and best metrics, cost",
        operation_id="compute_jobs_compare",
    )
    def get(self, request):
        ids = comparison.parse_ids(request.query_params.getlist("ids"))
        result = comparison.compare(caller(request).organization, ids)
        return Response(CompareOut(result).data)
