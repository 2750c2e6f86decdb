"""`/api/v1/operator/...`: endpoints for the people who run the compute providers, not for
organizations. Providers are shared by every organization, so an operator acts on any job.

Who is an operator: a signed-in staff user, or an API key created by an active staff user.
Anyone else gets 403 `permission_denied` (an organization's key must not learn that another
organization's job exists, so the job is only looked up for operators).
"""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, permissions, status
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.accounts.models import ApiKey
from apps.core.errors import Conflict
from apps.jobs.api.serializers import JobOut
from apps.jobs.execution import preemption
from apps.jobs.models import Job
from apps.jobs.selectors import attempts_prefetch


class IsOperator(permissions.BasePermission):
    message = "Only operators (staff) may do this."

    def has_permission(self, request, view) -> bool:
        if not (request.user and request.user.is_authenticated):
            raise exceptions.NotAuthenticated()
        if isinstance(request.auth, ApiKey):
            creator = request.auth.created_by
            return bool(creator and creator.is_active and creator.is_staff)
        return bool(request.user.is_staff)


class NotRunning(Conflict):
    error_type = "job_not_running"
    default_detail = "The job holds no running hardware to reclaim."


class ReclaimView(APIView):
    permission_classes = [IsOperator]

    @extend_schema(
        request=None,
        responses={202: JobOut},
        summary="Reclaim a running job's hardware (operators)",
        description=(
            "Takes the hardware back as a provider reclaiming a spot instance would: SIGTERM "
            "to the workload, SIGKILL after the grace period. The job goes `preempted` with "
            "reason `reclaimed` and is placed again; it resumes from its newest checkpoint."
        ),
    )
    def post(self, request, job_id: str):
        job = get_object_or_404(Job, public_id=job_id)
        try:
            preemption.reclaim_attempt(job)
        except preemption.NothingToReclaim as exc:
            raise NotRunning() from exc
        fresh = Job.objects.select_related("project").prefetch_related(attempts_prefetch())
        return Response(JobOut(fresh.get(pk=job.pk)).data, status=status.HTTP_202_ACCEPTED)
