"""The job state machine: the only place that knows which transition is legal.

    requested → allocating → provisioning → running → finalizing → succeeded | failed
    requested | allocating | provisioning | running | preempted → terminating → terminated
    provisioning | running → preempted → requested   (re-queued; attempt + 1; resumes)
    requested | allocating | provisioning → failed    (with a reason, e.g. no_capacity)
    preempted → failed                                 (too_many_preemptions)

`apps.jobs.services.job_transition` is the only writer of `Job.state`.
"""

from __future__ import annotations

from django.db import models


class JobState(models.TextChoices):
    REQUESTED = "requested"
    ALLOCATING = "allocating"
    PROVISIONING = "provisioning"
    RUNNING = "running"
    FINALIZING = "finalizing"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TERMINATING = "terminating"
    TERMINATED = "terminated"
    PREEMPTED = "preempted"


S = JobState

TRANSITIONS: dict[str, frozenset[str]] = {
    S.REQUESTED: frozenset({S.ALLOCATING, S.TERMINATING, S.FAILED}),
    S.ALLOCATING: frozenset({S.PROVISIONING, S.TERMINATING, S.FAILED}),
    S.PROVISIONING: frozenset({S.RUNNING, S.TERMINATING, S.PREEMPTED, S.FAILED}),
    S.RUNNING: frozenset({S.FINALIZING, S.TERMINATING, S.PREEMPTED}),
    S.FINALIZING: frozenset({S.SUCCEEDED, S.FAILED}),
    S.PREEMPTED: frozenset({S.REQUESTED, S.TERMINATING, S.FAILED}),
    S.TERMINATING: frozenset({S.TERMINATED}),
    S.SUCCEEDED: frozenset(),
    S.FAILED: frozenset(),
    S.TERMINATED: frozenset(),
}

TERMINAL_STATES = frozenset(state for state, targets in TRANSITIONS.items() if not targets)
# States in which the job holds (or is acquiring) hardware that must be released.
HOLDS_HARDWARE = frozenset({S.ALLOCATING, S.PROVISIONING, S.RUNNING, S.FINALIZING, S.TERMINATING})
# States from which a terminate request can end the job at once: nothing to release.
NOTHING_TO_RELEASE = frozenset({S.REQUESTED, S.PREEMPTED})


class IllegalTransition(Exception):
    def __init__(self, job_id: str, current: str, target: str) -> None:
        super().__init__(f"{job_id}: {current} → {target} is not a legal transition")
        self.current = current
        self.target = target


def is_legal(current: str, target: str) -> bool:
    return target in TRANSITIONS[current]


def is_terminal(state: str) -> bool:
    return state in TERMINAL_STATES
