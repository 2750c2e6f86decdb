"""The serving app's hook into jobs, named in `apps.jobs.outcomes.OUTCOME_HOOKS`: when a serve
job ends or is preempted (called by a Celery task after the job's write committed), its
endpoint's page is pushed, so it says `failed` or `starting` as a reload would. Only a push:
running it twice is harmless."""

from __future__ import annotations

from apps.jobs.models import Job
from apps.serving import live
from apps.serving.models import Endpoint


def job_outcome(*, job: Job, state: str) -> None:
    if job.kind != Job.Kind.SERVE:
        return
    for endpoint_id in Endpoint.objects.filter(job_id=job.pk).values_list("pk", flat=True):
        live.endpoint_changed(endpoint_id)
