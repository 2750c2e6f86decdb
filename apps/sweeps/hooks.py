"""The sweeps' one hook into jobs, named in `apps.jobs.outcomes.OUTCOME_HOOKS`: when a
trial's job reaches an outcome (called by a Celery task after the job's write committed), its
sweep moves on. Idempotent: `scheduling.advance` re-reads everything under the sweep's lock."""

from __future__ import annotations

from apps.jobs.models import Job
from apps.sweeps import scheduling
from apps.sweeps.models import Trial


def job_outcome(*, job: Job, state: str) -> None:
    sweep_id = Trial.objects.filter(job_id=job.pk).values_list("sweep_id", flat=True).first()
    if sweep_id is not None:
        scheduling.advance(sweep_id)
