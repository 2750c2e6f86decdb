"""Celery beat and a worker that was away: the ticks queued meanwhile are stale by the time it
returns, and it drops them rather than running every missed reconcile pass back to back."""

from __future__ import annotations

import pytest

from tests.integration.stack import wait_for

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

SENT = b"Sending due task reconcile (jobs.reconcile)"
DROPPED = b"Discarding revoked task: jobs.reconcile["


def test_reconcile_passes_queued_while_no_worker_ran_are_dropped_not_replayed(live_stack):
    beat, worker = live_stack.procs["beat"], live_stack.procs["worker"]
    worker.stop()
    sent_from = beat.log.stat().st_size
    wait_for(
        lambda: beat.log.read_bytes()[sent_from:].count(SENT) >= 4,
        timeout=30,
        what="beat to queue four reconcile passes with no worker",
    )
    dropped_from = worker.log.stat().st_size
    live_stack.start_worker()
    # Each pass expires a reconcile interval (1 s here) after beat sent it.
    wait_for(
        lambda: worker.log.read_bytes()[dropped_from:].count(DROPPED) >= 3,
        timeout=30,
        what="the worker to drop the passes that went stale while it was away",
    )
