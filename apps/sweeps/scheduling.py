"""Moving a sweep on: start trials while there are free slots, stop at the cost cap, and
end the sweep when no trial is left to run.

`advance` is the one place that does it, called when a sweep is created, when one of its
trials' jobs reaches an outcome (`hooks`), and by the beat pass (`tasks.reconcile`)
that catches a lost outcome and watches the cost of trials still running. It locks the
sweep's row first, so two callers at once take turns; every step is keyed (a trial's job
by its Idempotency-Key, a trial's state by its row), so running it twice changes nothing
the second time.
"""

from __future__ import annotations

import logging

from django.db import transaction
from django.utils import timezone

from apps.jobs import services as job_services
from apps.jobs.states import TERMINAL_STATES
from apps.sweeps import trials as trial_jobs
from apps.sweeps.models import Sweep, Trial

logger = logging.getLogger(__name__)

COST_CAP_REASON = "sweep_cost_cap"


def advance(sweep_id: int) -> Sweep | None:
    """Bring the sweep up to date; the sweep as it stands after, or None if it is gone."""
    with transaction.atomic():
        sweep = (
            Sweep.objects.select_for_update(of=("self",), no_key=True)
            .select_related("organization", "project", "created_by", "created_by_key")
            .filter(pk=sweep_id)
            .first()
        )
        if sweep is None or sweep.state != Sweep.State.RUNNING:
            return sweep
        trials = list(sweep.trials.select_related("job").order_by("index"))
        if sweep.max_cost_micros is not None and spent_micros(trials) >= sweep.max_cost_micros:
            _stop(sweep, trials, Sweep.StopReason.COST_CAP)
            return sweep
        active = sum(1 for trial in trials if _is_active(trial))
        for trial in trials:
            if active >= sweep.concurrency:
                break
            if trial.state != Trial.State.PENDING:
                continue
            started = trial_jobs.start(sweep, trial)
            if started.retry_later:  # stays pending: the next pass tries again
                break
            if started.job is None:
                trial.state, trial.error = Trial.State.ERROR, started.error
                trial.save(update_fields=["state", "error"])
                continue
            trial.state, trial.job = Trial.State.STARTED, started.job
            trial.save(update_fields=["state", "job"])
            active += 1
        if not active and not any(trial.state == Trial.State.PENDING for trial in trials):
            sweep.state, sweep.ended_at = Sweep.State.SUCCEEDED, timezone.now()
            sweep.save(update_fields=["state", "ended_at"])
    return sweep


def cancel(sweep_id: int) -> Sweep | None:
    """Stop the sweep at a user's request: terminate its active trials, skip the rest.
    Idempotent: a sweep already ended is left as it is."""
    with transaction.atomic():
        sweep = (
            Sweep.objects.select_for_update(of=("self",), no_key=True).filter(pk=sweep_id).first()
        )
        if sweep is None or sweep.state != Sweep.State.RUNNING:
            return sweep
        trials = list(sweep.trials.select_related("job").order_by("index"))
        _stop(sweep, trials, Sweep.StopReason.CANCELLED)
    return sweep


def spent_micros(trials: list[Trial]) -> int:
    """What the trials' jobs have cost so far: each job's accrued spend, which billing
    brings up to date every minute while it runs (at least one minute once it has
    hardware), so a running trial counts as it goes."""
    return sum(trial.job.accrued_micros for trial in trials if trial.job is not None)


def _is_active(trial: Trial) -> bool:
    return (
        trial.state == Trial.State.STARTED
        and trial.job is not None
        and trial.job.state not in TERMINAL_STATES
    )


def _stop(sweep: Sweep, trials: list[Trial], reason: str) -> None:
    """Call under the sweep's row lock."""
    if reason == Sweep.StopReason.COST_CAP:
        job_reason, message = COST_CAP_REASON, f"Sweep {sweep.public_id} reached its cost cap."
    else:
        job_reason, message = "cancelled", f"Sweep {sweep.public_id} was cancelled."
    for trial in trials:
        if _is_active(trial):
            job_services.job_terminate(job=trial.job, reason=job_reason, message=message)
    Trial.objects.filter(sweep=sweep, state=Trial.State.PENDING).update(state=Trial.State.SKIPPED)
    sweep.state, sweep.stop_reason, sweep.ended_at = Sweep.State.STOPPED, reason, timezone.now()
    sweep.save(update_fields=["state", "stop_reason", "ended_at"])
    logger.info("sweep %s stopped: %s", sweep.public_id, reason)
