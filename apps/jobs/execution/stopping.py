"""Stopping a terminating job's workload at once (`jobs.stop_job`, sent when the job turns
`terminating`), rather than when the runner's next heartbeat answer or the next reconcile
pass carries the order (each every few seconds).

The backend is signalled directly (the local and SSH backends send SIGTERM to the process
group or the container, then SIGKILL after the grace; Slurm's scancel does the same), the
task watches the workload go, and then supervision reads its end and finishes the job: the
state is still written only by the one writer, the same way a reconcile pass would write
it. Safe to run twice and alongside reconcile: the signal is sent once per attempt
(`terminate_requested_at`), and a second one is harmless anyway.
"""

from __future__ import annotations

import logging
import time

from apps.jobs.execution.limits import grace_for
from apps.jobs.execution.supervision import supervise
from apps.jobs.models import Attempt
from apps.jobs.states import JobState
from apps.providers.backends import backend_for
from apps.providers.backends.base import RetryableBackendError

logger = logging.getLogger(__name__)

POLL_INTERVAL_S = 0.05
# After the grace, how long the task keeps watching before leaving the rest to reconcile.
EXTRA_WAIT_S = 2.0
MAX_WAIT_S = 15.0


def stop_now(job_id: int) -> None:
    attempt = (
        Attempt.objects.select_related("provider", "job")
        .filter(job_id=job_id, ended_at__isnull=True, launched_at__isnull=False)
        .order_by("-number")
        .first()
    )
    if attempt is None or not attempt.handle or attempt.job.state != JobState.TERMINATING:
        return
    try:
        supervise(attempt.pk)  # sends the signal (once) and reads where the attempt stands
        backend = backend_for(attempt.provider)
        wait = min(grace_for(attempt.job.reason) + EXTRA_WAIT_S, MAX_WAIT_S)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if Attempt.objects.filter(pk=attempt.pk, ended_at__isnull=False).exists():
                return  # the runner's exit report (or a reconcile pass) finished it
            if backend.poll(attempt.handle).state != "running":
                break
            time.sleep(POLL_INTERVAL_S)
        supervise(attempt.pk)  # its end, read and written as a reconcile pass would
    except RetryableBackendError as exc:  # the provider is out of reach: reconcile retries
        logger.warning("stopping job %s: %s; reconcile takes it from here", job_id, exc)
