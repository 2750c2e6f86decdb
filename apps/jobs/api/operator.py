"""`/api/v1/operator/...`: endpoints for the people who run the compute providers, not for
organizations. Providers are shared by every organization, so an operator acts on any job.

Who is an operator: an active staff user (or superuser) signed in with a session. Operator
rights never come from an API key: a key belongs to one organization, whoever created it, so
every key gets 403 `permission_denied`, as does anyone else (an organization's key must not
learn that another organization's job exists, so the job is only looked up for operators).

An operator acts on organizations they do not belong to, so the answer is the job's
operational fields only (`OperatorJobOut`): never its name, project, container (image,
command, env, secret references) or SSH access.
"""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import exceptions, permissions, serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.accounts.models import ApiKey
from apps.core.errors import Conflict
from apps.jobs.api.serializers import AttemptOut, HardwareOut
from apps.jobs.execution import preemption
from apps.jobs.models import Job


class IsOperator(permissions.BasePermission):
    message = "Only operators (staff) may do this."

    def has_permission(self, request, view) -> bool:
        if not (request.user and request.user.is_authenticated):
            raise exceptions.NotAuthenticated()
        if isinstance(request.auth, ApiKey):
            return False  # an organization's key, never an operator's, whoever made it
        user = request.user
        return bool(user.is_active and (user.is_staff or user.is_superuser))


class OperatorJobOut(serializers.Serializer):
    """What an operator sees of a job of any organization: enough to follow the reclaim,
    nothing of what the organization put in it."""

    id = serializers.CharField(source="public_id")
    kind = serializers.CharField()
    priority_class = serializers.CharField()
    state = serializers.CharField()
    reason = serializers.CharField(allow_null=True)
    hardware = serializers.SerializerMethodField()
    preemption_count = serializers.IntegerField()
    attempts = AttemptOut(many=True)

    @extend_schema_field(HardwareOut(allow_null=True))
    def get_hardware(self, job: Job) -> dict | None:
        attempts = list(job.attempts.all())
        if not attempts:
            return None
        last = attempts[-1]
        return {
            "accelerator": last.accelerator,
            "gpu_count": last.gpu_count,
            "gpu_memory_gb": last.gpu_memory_gb,
        }


class NotRunning(Conflict):
    error_type = "job_not_running"
    default_detail = "The job holds no running hardware to reclaim."


class ReclaimView(APIView):
    permission_classes = [IsOperator]

    @extend_schema(
        request=None,
        responses={202: OperatorJobOut},
        summary="Reclaim a running job's hardware (operators)",
        description=(
            "Takes the hardware back as a provider reclaiming a spot instance would: SIGTERM "
            "to the workload, SIGKILL after the grace period. The job goes `preempted` with "
            "reason `reclaimed` and is placed again; it resumes from its newest checkpoint. "
            "Only staff users signed in with a session; API keys are refused."
        ),
    )
    def post(self, request, job_id: str):
        job = get_object_or_404(Job, public_id=job_id)
        try:
            preemption.reclaim_attempt(job)
        except preemption.NothingToReclaim as exc:
            raise NotRunning() from exc
        fresh = Job.objects.select_related("project").with_attempts()
        return Response(OperatorJobOut(fresh.get(pk=job.pk)).data, status=status.HTTP_202_ACCEPTED)
