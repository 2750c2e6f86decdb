"""Live updates: channel-group names, the job's live sequence, and the pushes sent after a
write commits (docs/realtime.md).

Every write that a job page shows (a state change, an event, log lines, metric points) bumps
`Job.live_seq` in its own transaction and, after commit, pushes one message to the job's
group: the rendered partials (out-of-band swaps for htmx's ws extension) with that sequence
number. Rendered once per write, not once per viewer. The channel layer may drop messages; a
page that sees a gap in the sequence, or reconnects, fetches what it missed by id.
A failed push never fails the write.
"""

from __future__ import annotations

import logging
from functools import partial

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction
from django.db.models import F

logger = logging.getLogger(__name__)


def job_group(job_public_id: str) -> str:
    return f"job.{job_public_id}"


def project_group(project_public_id: str) -> str:
    return f"project.{project_public_id}"


def bump_live_seq(job_pk: int) -> int:
    """Take the job's next live sequence number. Call inside the write's transaction: the
    row stays locked until commit, so numbers are taken in commit order."""
    from apps.jobs.models import Job

    Job.objects.filter(pk=job_pk).update(live_seq=F("live_seq") + 1)
    return Job.objects.filter(pk=job_pk).values_list("live_seq", flat=True).get()


def push_on_commit(
    *,
    job_pk: int,
    seq: int,
    event_ids: list[int] = (),
    log_ids: list[int] = (),
    metric_ids: list[int] = (),
    state_changed: bool = False,
) -> None:
    transaction.on_commit(
        partial(
            _push,
            job_pk=job_pk,
            seq=seq,
            event_ids=list(event_ids),
            log_ids=list(log_ids),
            metric_ids=list(metric_ids),
            state_changed=state_changed,
        ),
        robust=True,
    )


def _push(*, job_pk, seq, event_ids, log_ids, metric_ids, state_changed) -> None:
    from apps.jobs import live

    layer = get_channel_layer()
    if layer is None:
        return
    try:
        job = live.job_for_push(job_pk)
        html = live.render_push(
            job,
            seq=seq,
            event_ids=event_ids,
            log_ids=log_ids,
            metric_ids=metric_ids,
            state_changed=state_changed,
        )
        async_to_sync(layer.group_send)(
            job_group(job.public_id), {"type": "job.push", "seq": seq, "html": html}
        )
        if state_changed:
            async_to_sync(layer.group_send)(
                project_group(job.project.public_id),
                {"type": "project.push", "job": job.public_id, "html": live.render_row_push(job)},
            )
    except Exception:  # the write has committed; pages recover what a lost push carried
        logger.warning("live push for job %s failed", job_pk, exc_info=True)
