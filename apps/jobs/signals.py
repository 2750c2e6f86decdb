"""What other apps may listen to when a job reaches an outcome, without `apps.jobs` knowing
them (sweeps advance, webhooks deliver).

`job_outcome` is sent by the `jobs.job_outcome` task, in a Celery worker, after the write
that moved the job has committed: never inside the request or the transaction that moved it.
It is sent for every ended state (succeeded, failed, terminated) and for preempted. Celery
delivers at least once, so a receiver may see the same outcome twice and must be idempotent
(key its own writes on the job and the state). A receiver that raises is logged and does
not stop the others.

Arguments: `job` (the Job as it stands when the task runs) and `state` (the state it
reached, which it may have left since: a preempted job is requeued at once).
"""

from __future__ import annotations

from django.dispatch import Signal

job_outcome = Signal()
