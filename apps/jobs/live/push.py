"""Live updates: channel-group names, the job's live sequence, watchers, and the pushes sent
after a write commits (docs/realtime.md).

Every write that a job page shows (a state change, an event, log lines, metric points) bumps
`Job.live_seq` in its own transaction and, after commit, pushes one message to the job's
group: the rendered partials (out-of-band swaps for htmx's ws extension) with that sequence
number. Rendered once per write, not once per viewer — and not at all when no page watches
the group (consumers count themselves in Redis), so a busy job nobody looks at costs no
rendering. The channel layer may drop messages; a page that sees a gap in the sequence, or
reconnects, fetches what it missed by id. A failed push never fails the write.
"""

from __future__ import annotations

import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import connection

from apps.core.errors import NotFound
from apps.core.live import (  # noqa: F401 (WATCH_KEY, WATCH_TTL_S, watch_key: offered here)
    WATCH_KEY,
    WATCH_TTL_S,
    watch_key,
    watched,
    watched_groups,
)
from apps.core.transactions import after_commit
from apps.jobs.live import partials
from apps.jobs.models import Job

logger = logging.getLogger(__name__)


def job_group(job_public_id: str) -> str:
    return f"job.{job_public_id}"


def project_group(project_public_id: str) -> str:
    return f"project.{project_public_id}"


def overview_group(organization_id: int) -> str:
    """The organization's overview pages: told "something changed" (they re-render)."""
    return f"overview.org.{organization_id}"


def org_jobs_group(organization_id: int) -> str:
    """The organization's all-jobs lists: sent each changed job's row and its facts."""
    return f"jobs.org.{organization_id}"


def bump_live_seq(job_pk: int, *, user_lines: int = 0, system_lines: int = 0) -> int:
    """Take the job's next live sequence number (and add to its log-line counts, in the same
    statement). Call inside the write's transaction: the row stays locked until commit, so
    numbers are taken in commit order. Raises NotFound when the job is gone (deleted while
    its lines were being written: the caller's transaction, lines and all, is undone)."""
    table = Job._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET live_seq = live_seq + 1, "
            "user_log_lines = user_log_lines + %s, system_log_lines = system_log_lines + %s "
            "WHERE id = %s RETURNING live_seq",
            [user_lines, system_lines, job_pk],
        )
        row = cursor.fetchone()
    if row is None:
        raise NotFound("The job no longer exists.")
    return row[0]


def bump_live_seqs(lines: dict[int, list[tuple[int, int]]]) -> dict[int, list[int]]:
    """`bump_live_seq` for many jobs in one statement (a relay's bundle): `lines` maps a job
    id to the (user lines, system lines) of each of its writes; the answer maps it to the
    live sequence numbers those writes take, in order. Rows are locked in id order, as two
    bundles touching the same jobs must. Raises NotFound when a job is gone. PostgreSQL
    only."""
    ids = sorted(lines)
    table = Job._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} AS j SET live_seq = j.live_seq + v.writes, "
            "user_log_lines = j.user_log_lines + v.users, "
            "system_log_lines = j.system_log_lines + v.systems "
            f"FROM (SELECT id FROM {table} WHERE id = ANY(%s) ORDER BY id FOR NO KEY UPDATE) "
            "AS locked, unnest(%s::bigint[], %s::int[], %s::int[], %s::int[]) "
            "AS v(id, writes, users, systems) "
            "WHERE j.id = locked.id AND j.id = v.id RETURNING j.id, j.live_seq",
            [
                ids,
                ids,
                [len(lines[pk]) for pk in ids],
                [sum(user for user, _ in lines[pk]) for pk in ids],
                [sum(system for _, system in lines[pk]) for pk in ids],
            ],
        )
        last = dict(cursor.fetchall())
    if len(last) != len(ids):
        raise NotFound("The job no longer exists.")
    return {pk: list(range(last[pk] - len(lines[pk]) + 1, last[pk] + 1)) for pk in ids}


def push_on_commit(
    *,
    job,
    seq: int,
    event_ids: list[int] = (),
    log_ids: list[int] = (),
    log_seqs: tuple[int, list[int]] | None = None,
    metric_ids: list[int] = (),
    state_changed: bool = False,
) -> None:
    """After commit, render what changed for whoever watches. New log lines are named by id
    (`log_ids`) or, for a runner's batch (stored without reading ids back), by
    `log_seqs`: (attempt, seqs)."""
    after_commit(
        _push,
        job_pk=job.pk,
        groups=(job_group(job.public_id), project_group(job.project.public_id)),
        organization_id=job.organization_id,
        seq=seq,
        event_ids=list(event_ids),
        log_ids=list(log_ids),
        log_seqs=log_seqs,
        metric_ids=list(metric_ids),
        state_changed=state_changed,
    )


def push_lines_on_commit(pushes: list[tuple[Job, int, tuple[int, list[int]]]]) -> None:
    """`push_on_commit(job=..., seq=..., log_seqs=...)` for each (job, seq, log_seqs) of a
    relay's bundle: after commit, one look-up in Redis says which of those jobs' pages are
    watched, and only theirs are rendered and sent (a look-up per job was a third of the
    time a bundle took)."""
    if not pushes:
        return
    after_commit(
        _push_lines,
        [
            (job.pk, (job_group(job.public_id), project_group(job.project.public_id)), seq, lines)
            for job, seq, lines in pushes
        ],
    )


def push_states_on_commit(pushes: list[tuple[Job, int]]) -> None:
    """`push_on_commit(job=..., seq=..., state_changed=True)` for each (job, seq) of a
    write to many jobs (a reconcile pass billing a hundred): after commit, one look-up in
    Redis says which of the pages that show those jobs are watched, not one per job."""
    if not pushes:
        return
    after_commit(
        _push_states,
        [
            (
                job.pk,
                (job_group(job.public_id), project_group(job.project.public_id)),
                job.organization_id,
                seq,
            )
            for job, seq in pushes
        ],
    )


def _push_states(pushes: list[tuple[int, tuple[str, str], int, int]]) -> None:
    looked_up = watched_groups(
        *(
            group
            for _, (job, project), organization_id, _ in pushes
            for group in (
                job,
                project,
                overview_group(organization_id),
                org_jobs_group(organization_id),
            )
        )
    )
    for i, (job_pk, groups, organization_id, seq) in enumerate(pushes):
        watching = tuple(looked_up[4 * i : 4 * i + 4])
        if any(watching):
            _push(
                job_pk=job_pk,
                groups=groups,
                organization_id=organization_id,
                seq=seq,
                state_changed=True,
                watching=watching,
            )


def _push_lines(pushes: list[tuple[int, tuple[str, str], int, tuple[int, list[int]]]]) -> None:
    watching = watched_groups(*(groups[0] for _, groups, _, _ in pushes))
    for (job_pk, groups, seq, log_seqs), watched_now in zip(pushes, watching, strict=True):
        if watched_now:
            _push(
                job_pk=job_pk,
                groups=groups,
                seq=seq,
                log_seqs=log_seqs,
                watching=(True, False, False, False),
            )


def _push(
    *,
    job_pk,
    groups,
    seq,
    organization_id=None,
    event_ids=(),
    log_ids=(),
    log_seqs=None,
    metric_ids=(),
    state_changed=False,
    watching=None,
) -> None:
    """Render and send a push to the groups watched (the job's, its project's, the
    organization's overview and job list), as Redis says unless `watching` says it."""
    layer = get_channel_layer()
    group, projects = groups
    if watching is None and state_changed:
        watching = watched_groups(
            group, projects, overview_group(organization_id), org_jobs_group(organization_id)
        )
    elif watching is None:
        watching = (watched(group), False, False, False)
    to_job, to_project, to_overview, to_list = watching
    if layer is None or not (to_job or to_project or to_overview or to_list):
        return  # nobody is looking: render nothing
    try:
        job = partials.job_for_push(job_pk)
        if to_job:
            html = partials.render_push(
                job,
                seq=seq,
                event_ids=event_ids,
                log_ids=log_ids,
                log_seqs=log_seqs,
                metric_ids=metric_ids,
                state_changed=state_changed,
            )
            async_to_sync(layer.group_send)(group, {"type": "job.push", "seq": seq, "html": html})
        if to_project:
            row = partials.render_row_push(job)
            async_to_sync(layer.group_send)(
                projects, {"type": "project.push", "job": job.public_id, "html": row}
            )
        if to_overview:
            async_to_sync(layer.group_send)(
                overview_group(organization_id), {"type": "overview.changed"}
            )
        if to_list:
            async_to_sync(layer.group_send)(
                org_jobs_group(organization_id),
                {
                    "type": "org.jobs.push",
                    "facts": partials.push_facts(job),
                    "html": partials.render_org_row_push(job),
                    "delete": partials.render_row_delete(job),
                },
            )
    except Exception:  # the write has committed; pages recover what a lost push carried
        logger.warning("live push for job %s failed", job_pk, exc_info=True)
