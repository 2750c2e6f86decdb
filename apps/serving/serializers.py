"""What `/api/v1/endpoints` answers: each body rendered by one of these serializers, which are
also the operations' response schemas. Read from model rows (`selectors.endpoint_for_org`
loads what they follow)."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from apps.core.api import page_out
from apps.core.money import micros_to_usd
from apps.jobs.artifacts.store import public_artifact_id
from apps.serving import selectors
from apps.serving.models import Endpoint, EndpointRevision, Promotion

# Named in SPECTACULAR_SETTINGS' enum overrides: what `selectors.endpoint_state` answers,
# and how a revision went live.
ENDPOINT_STATES = Endpoint.State.values
PROMOTION_KINDS = Promotion.Kind.values


class HubPinOut(serializers.Serializer):
    revision = serializers.CharField(source="hub_revision")
    commit = serializers.CharField(source="hub_commit.oid")


class RevisionOut(serializers.Serializer):
    number = serializers.IntegerField()
    label = serializers.CharField()
    served_name = serializers.CharField()
    state = serializers.ChoiceField(choices=EndpointRevision.State.values)
    artifact = serializers.SerializerMethodField()
    artifact_kind = serializers.CharField(source="artifact.kind", allow_null=True)
    artifact_step = serializers.IntegerField(source="artifact.step", allow_null=True)
    job_id = serializers.CharField(source="artifact.job.public_id", allow_null=True)
    hub = serializers.SerializerMethodField()
    error_message = serializers.SerializerMethodField()
    created_at = serializers.DateTimeField()
    ready_at = serializers.DateTimeField(allow_null=True)

    @extend_schema_field(serializers.CharField(allow_null=True, help_text="`art_…`"))
    def get_artifact(self, revision: EndpointRevision) -> str | None:
        return public_artifact_id(revision.artifact) if revision.artifact else None

    @extend_schema_field(HubPinOut(allow_null=True))
    def get_hub(self, revision: EndpointRevision) -> dict | None:
        return HubPinOut(revision).data if revision.hub_commit else None

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_error_message(self, revision: EndpointRevision) -> str | None:
        return revision.error_message or None


class PromotionOut(serializers.Serializer):
    revision = serializers.IntegerField(source="revision.number")
    replaced = serializers.IntegerField(source="replaced.number", allow_null=True)
    kind = serializers.ChoiceField(choices=PROMOTION_KINDS)
    by = serializers.SerializerMethodField()
    at = serializers.DateTimeField()

    @extend_schema_field(
        serializers.CharField(allow_null=True, help_text="a user's email or an API key's prefix")
    )
    def get_by(self, promotion: Promotion) -> str | None:
        if promotion.by_user:
            return promotion.by_user.email
        return promotion.by_key.prefix if promotion.by_key else None


class EndpointOut(serializers.Serializer):
    id = serializers.CharField(source="public_id")
    object = serializers.SerializerMethodField()
    name = serializers.CharField()
    project = serializers.CharField(source="project.public_id")
    base_model = serializers.CharField()
    compute = serializers.DictField()
    state = serializers.SerializerMethodField()
    job_id = serializers.CharField(source="job.public_id", allow_null=True)
    current_revision = RevisionOut(allow_null=True)
    previous_revision = RevisionOut(allow_null=True)
    accrued_usd = serializers.SerializerMethodField()
    created_at = serializers.DateTimeField()
    stopped_at = serializers.DateTimeField(allow_null=True)

    @extend_schema_field(serializers.ChoiceField(choices=["endpoint"]))
    def get_object(self, endpoint: Endpoint) -> str:
        return "endpoint"

    @extend_schema_field(serializers.ChoiceField(choices=ENDPOINT_STATES))
    def get_state(self, endpoint: Endpoint) -> str:
        return selectors.endpoint_state(endpoint)

    @extend_schema_field(OpenApiTypes.DOUBLE)
    def get_accrued_usd(self, endpoint: Endpoint) -> float:
        return micros_to_usd(endpoint.job.accrued_micros) if endpoint.job else 0.0


class EndpointDetailOut(EndpointOut):
    """An endpoint with its revisions (newest first) and its last 100 promotions."""

    revisions = serializers.SerializerMethodField()
    promotions = serializers.SerializerMethodField()

    @extend_schema_field(RevisionOut(many=True))
    def get_revisions(self, endpoint: Endpoint) -> list[dict]:
        revisions = endpoint.revisions.select_related("artifact__job", "hub_commit")
        return RevisionOut(revisions.order_by("-number"), many=True).data

    @extend_schema_field(PromotionOut(many=True))
    def get_promotions(self, endpoint: Endpoint) -> list[dict]:
        promotions = endpoint.promotions.select_related(
            "revision", "replaced", "by_user", "by_key"
        )[:100]
        return PromotionOut(promotions, many=True).data


class EndpointTargetOut(EndpointDetailOut):
    """The endpoint after a new target was set, with the revision that target made."""

    revision = serializers.SerializerMethodField()

    @extend_schema_field(RevisionOut())
    def get_revision(self, endpoint: Endpoint) -> dict:
        return RevisionOut(self.context["revision"]).data


EndpointPage = page_out(
    EndpointOut, "EndpointPage", object=serializers.ChoiceField(choices=["list"])
)


class UsageDayOut(serializers.Serializer):
    day = serializers.DateField()
    key = serializers.CharField(allow_null=True, help_text="the API key's prefix; null: dashboard")
    requests = serializers.IntegerField()
    prompt_tokens = serializers.IntegerField()
    completion_tokens = serializers.IntegerField()
    errors = serializers.IntegerField()
    latency_p50_ms = serializers.IntegerField(allow_null=True)
    latency_p95_ms = serializers.IntegerField(allow_null=True)


class EndpointUsageOut(serializers.Serializer):
    object = serializers.ChoiceField(choices=["list"])
    endpoint = serializers.CharField()
    data = UsageDayOut(many=True)
