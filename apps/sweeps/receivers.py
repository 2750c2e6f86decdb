"""The sweeps' one hook into jobs: when a trial's job reaches an outcome, its sweep moves
on (`apps.jobs.signals.job_outcome`, sent by a Celery task after the job's write
committed). Idempotent: `scheduling.advance` re-reads everything under the sweep's lock."""

from __future__ import annotations

from django.dispatch import receiver

from apps.jobs.signals import job_outcome
from apps.sweeps import scheduling
from apps.sweeps.models import Trial


@receiver(job_outcome, dispatch_uid="sweeps.advance_on_job_outcome")
def advance_on_job_outcome(sender, job, state: str, **kwargs) -> None:
    sweep_id = Trial.objects.filter(job_id=job.pk).values_list("sweep_id", flat=True).first()
    if sweep_id is not None:
        scheduling.advance(sweep_id)
