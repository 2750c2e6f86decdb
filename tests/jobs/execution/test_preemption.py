"""Preemption on the real database: who is displaced, where the freed slot goes, how an
attempt's end is read, the cap, and where a resumed attempt picks up. The runner and its
process are played by the service calls they make (the integration tests run them)."""

from __future__ import annotations

import os
import signal
import subprocess
from datetime import timedelta

import pytest
from django.utils import timezone

from apps.catalog.models import Offer
from apps.jobs import services
from apps.jobs.execution import attempts, dispatch, reports, supervision
from apps.jobs.live import partials
from apps.jobs.models import Artifact, Attempt, Job, JobEvent, MetricPoint
from apps.jobs.states import JobState
from apps.providers.models import Provider
from runner import procfs
from tests.jobs.helpers import running
from tests.jobs.helpers import submit_on as submit

pytestmark = pytest.mark.django_db


def state(job: Job) -> str:
    return Job.objects.get(pk=job.pk).state


def reclaimed(attempt: Attempt) -> None:
    """What a provider's reclaim does: recorded on the attempt, then SIGTERM, exit 143."""
    Attempt.objects.filter(pk=attempt.pk).update(reclaim_reason="reclaimed")
    reports.runner_exited(attempt.pk, 143)


def test_a_standard_job_displaces_the_most_recently_started_preemptible_attempt(org, slots):
    slots(2)
    older = running(submit(org, slots, priority="preemptible"), started_minutes_ago=30)
    newer = running(submit(org, slots, priority="preemptible"), started_minutes_ago=2)
    standard = submit(org, slots)

    assert dispatch.allocate(standard.pk) is None  # it waits for the slot to free
    newer.refresh_from_db()
    older.refresh_from_db()
    assert newer.preempted_by_id == standard.pk and newer.preempt_requested_at is not None
    assert older.preempt_requested_at is None
    assert reports.runner_heartbeat(newer.pk) == "checkpoint_and_exit"
    assert reports.runner_heartbeat(older.pk) == "continue"
    told = JobEvent.objects.get(job=newer.job, type="preemption_requested")
    assert told.data == {"preempted_by": standard.public_id}
    assert JobEvent.objects.filter(job=standard, type="preempting").count() == 1

    # Dispatched again while the victim stops, it waits: it does not displace another.
    assert dispatch.allocate(standard.pk) is None
    assert Attempt.objects.filter(preempted_by=standard).count() == 1
    assert state(standard) == JobState.REQUESTED


def test_only_standard_jobs_displace_and_only_preemptible_ones_are_displaced(org, slots):
    slots(1)
    holder = running(submit(org, slots, priority="standard"))
    for priority in ("standard", "preemptible"):
        waiting = submit(org, slots, priority=priority)
        assert dispatch.allocate(waiting.pk) is None
        assert JobEvent.objects.filter(job=waiting, type="waiting_for_capacity").exists()
    holder.refresh_from_db()
    assert holder.preempt_requested_at is None


def test_standard_jobs_stay_off_spot_offers_and_preemptible_ones_take_them(org, slots):
    spot = slots(1, market=Offer.Market.SPOT, price=200_000)
    on_demand = slots(1, price=900_000)
    standard = running(submit(org, slots))
    assert standard.offer_id == on_demand.pk
    assert running(submit(org, slots, priority="preemptible")).offer_id == spot.pk


def test_the_freed_slot_is_held_for_the_displacing_job_then_the_victim_runs_again(org, slots):
    slots(1)
    victim = running(submit(org, slots, priority="preemptible"))
    standard = submit(org, slots)
    dispatch.allocate(standard.pk)

    # SIGUSR1: the workload saved and exited 0; that is a preemption, not a success.
    reports.runner_exited(victim.pk, 0)
    job = Job.objects.get(pk=victim.job_id)
    assert job.state == JobState.PREEMPTED and job.reason == "preempted_by"
    assert job.preemption_count == 1
    change = JobEvent.objects.filter(job=job, type="state_changed").last()
    assert change.data["to"] == "preempted" and change.data["preempted_by"] == standard.public_id
    victim.refresh_from_db()
    assert victim.ended_at is not None and victim.end_reason == "preempted"

    # Neither the victim nor a newcomer gets the slot before the standard job does.
    newcomer = submit(org, slots, priority="preemptible")
    assert dispatch.allocate(victim.job_id) is None
    assert dispatch.allocate(newcomer.pk) is None
    assert state(job) == JobState.PREEMPTED
    placed = dispatch.allocate(standard.pk)
    assert placed is not None and placed.offer_id == victim.offer_id

    # Once the standard job is done, the victim goes back through `requested`, attempt 2.
    services.job_terminate(job=newcomer)
    attempts.end_attempt(placed, reason="exit_code_0")
    second = dispatch.allocate(victim.job_id)
    assert second is not None and second.number == 2
    changes = [
        (e.data["from"], e.data["to"])
        for e in JobEvent.objects.filter(job=job, type="state_changed").order_by("id")
    ]
    assert changes[-2:] == [("preempted", "requested"), ("requested", "allocating")]


def test_a_preempted_job_waits_past_the_no_capacity_timeout(org, slots, settings):
    slots(1)
    victim = running(submit(org, slots, priority="preemptible"))
    standard = submit(org, slots)
    dispatch.allocate(standard.pk)
    reports.runner_exited(victim.pk, 0)
    settings.NO_CAPACITY_TIMEOUT_S = 0
    dispatch.allocate(victim.job_id)
    assert state(victim.job) == JobState.PREEMPTED


@pytest.mark.parametrize(
    ("mark", "exit_code", "reason"),
    [
        ({"reclaim_reason": "reclaimed"}, 1, "reclaimed"),
        ({"reclaim_reason": "reclaimed"}, 143, "reclaimed"),  # the provider's SIGTERM
        ({"reclaim_reason": "heartbeat_lost"}, 137, "reclaimed"),  # we killed a silent one
    ],
)
def test_a_reclaim_preempts_the_job(org, slots, mark, exit_code, reason):
    slots(1)
    attempt = running(submit(org, slots))
    Attempt.objects.filter(pk=attempt.pk).update(**mark)
    reports.runner_exited(attempt.pk, exit_code)
    job = Job.objects.get(pk=attempt.job_id)
    assert (job.state, job.reason) == (JobState.PREEMPTED, reason)
    assert Attempt.objects.get(pk=attempt.pk).end_reason == "reclaimed"


def test_an_exit_143_nobody_reported_is_the_workloads_own_and_fails_the_job(org, slots):
    # A workload may exit 143 (or SIGTERM itself, or its runner) whenever it likes: were that
    # a reclaim, it would run again, PREEMPTION_MAX_PER_JOB times, each attempt nearly free.
    slots(1)
    attempt = running(submit(org, slots))
    reports.runner_exited(attempt.pk, 143)
    supervision.finalize(attempt.job_id)
    job = Job.objects.get(pk=attempt.job_id)
    assert (job.state, job.reason, job.exit_code) == (JobState.FAILED, "exit_code_143", 143)
    assert job.preemption_count == 0 and job.attempt_count == 1
    assert Attempt.objects.get(pk=attempt.pk).end_reason == "exit_code_143"
    assert not dispatch.allocate(job.pk)  # nothing runs again


@pytest.mark.parametrize("exit_code", [143, 137])
def test_on_a_batch_scheduler_a_stop_nobody_asked_for_waits_for_the_schedulers_word(
    org, slots, exit_code
):
    # Slurm preempts with SIGTERM (the runner SIGKILLs a workload slow to stop: 137); the
    # runner's report comes before Slurm's own state says so. The next poll decides.
    slots(1)
    attempt = running(submit(org, slots))
    Provider.objects.filter(pk=attempt.provider_id).update(kind=Provider.Kind.SLURM)
    reports.runner_exited(attempt.pk, exit_code)
    assert state(attempt.job) == JobState.RUNNING  # not failed on the runner's word
    reports.runner_exited(attempt.pk, exit_code, confirmed=True)  # Slurm: it exited
    supervision.finalize(attempt.job_id)
    job = Job.objects.get(pk=attempt.job_id)
    assert (job.state, job.reason) == (JobState.FAILED, f"exit_code_{exit_code}")


def test_an_exit_143_after_a_displacement_is_a_preemption(org, slots):
    slots(1)
    victim = running(submit(org, slots, priority="preemptible"))
    dispatch.allocate(submit(org, slots).pk)
    reports.runner_exited(victim.pk, 143)
    job = Job.objects.get(pk=victim.job_id)
    assert (job.state, job.reason) == (JobState.PREEMPTED, "preempted_by")


def test_an_exit_143_we_asked_for_is_a_termination_and_an_exit_1_a_failure(org, slots):
    slots(2)
    terminated = running(submit(org, slots))
    services.job_terminate(job=terminated.job)
    reports.runner_exited(terminated.pk, 143)
    supervision.finalize(terminated.job_id)
    assert state(terminated.job) == JobState.TERMINATED
    failed = running(submit(org, slots))
    reports.runner_exited(failed.pk, 1)
    supervision.finalize(failed.job_id)
    assert state(failed.job) == JobState.FAILED


def test_a_finetune_that_finished_its_adapter_while_told_to_stop_succeeds(org, slots):
    slots(1)
    victim = running(submit(org, slots, priority="preemptible", kind="finetune"))
    dispatch.allocate(submit(org, slots).pk)
    Artifact.objects.create(
        job=victim.job, attempt=1, kind="adapter", sha256="0" * 64, storage_path="a"
    )
    reports.runner_exited(victim.pk, 0)
    supervision.finalize(victim.job_id)
    assert state(victim.job) == JobState.SUCCEEDED


def test_past_the_cap_a_preempted_job_fails_too_many_preemptions(org, slots, settings):
    settings.PREEMPTION_MAX_PER_JOB = 1
    slots(1)
    job = submit(org, slots)
    first = running(job)
    reclaimed(first)
    assert state(job) == JobState.PREEMPTED
    second = running(job)
    reclaimed(second)
    job.refresh_from_db()
    assert (job.state, job.reason) == (JobState.FAILED, "too_many_preemptions")
    assert job.preemption_count == 2
    assert "Preempted 2 times" in job.error_message


def test_a_resumed_attempt_supersedes_the_steps_it_trains_again(org, slots):
    slots(1)
    job = submit(org, slots)
    first = running(job)
    for step in range(1, 8):
        MetricPoint.objects.create(job=job, attempt=1, step=step, loss=10 - step)
    reclaimed(first)
    second = dispatch.allocate(job.pk)
    services.job_transition(job_id=job.pk, to=JobState.PROVISIONING)
    reports.runner_started(second.pk, resumed_from_step=5)
    for step in (6, 7, 8):
        MetricPoint.objects.create(job=job, attempt=2, step=step, loss=1.0)

    event = JobEvent.objects.get(job=job, type="resumed_from_checkpoint")
    assert event.data == {"step": 5} and event.attempt == 2
    chart = partials.initial_chart(job)
    assert [step for _, step, _ in chart] == [1, 2, 3, 4, 5, 6, 7, 8]
    assert [loss for _, step, loss in chart if step > 5] == [1.0, 1.0, 1.0]
    assert partials.resume_steps(job) == [5]


def test_a_restart_without_a_checkpoint_says_so_and_supersedes_every_step(org, slots):
    slots(1)
    job = submit(org, slots)
    first = running(job)
    MetricPoint.objects.create(job=job, attempt=1, step=1, loss=3.0)
    reclaimed(first)
    second = dispatch.allocate(job.pk)
    services.job_transition(job_id=job.pk, to=JobState.PROVISIONING)
    reports.runner_started(second.pk, resumed_from_step=None)
    restart = JobEvent.objects.get(job=job, type="restarted_from_beginning")
    assert "starts from the beginning" in restart.message
    assert partials.initial_chart(job) == []
    assert partials.resume_steps(job) == [0]


def test_a_silent_runner_is_killed_and_its_job_reclaimed(org, slots, settings, tmp_path):
    settings.HEARTBEAT_TIMEOUT_S = 1
    slots(1)
    process = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        info = procfs.stat(process.pid)
        handle = {
            "pid": process.pid,
            "pgid": process.pid,
            "start_ticks": info.start_ticks,
            "workdir": str(tmp_path),
        }
        attempt = running(submit(org, slots), handle=handle)
        Attempt.objects.filter(pk=attempt.pk).update(
            last_heartbeat_at=timezone.now() - timedelta(seconds=5)
        )
        supervision.supervise(attempt.pk)
        assert JobEvent.objects.filter(job=attempt.job, type="heartbeat_lost").exists()
        process.wait(timeout=10)  # killed by the backend's reaper
        supervision.supervise(attempt.pk)
        job = Job.objects.get(pk=attempt.job_id)
        assert (job.state, job.reason) == (JobState.PREEMPTED, "reclaimed")
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def test_a_job_terminated_before_its_launch_ends_terminated(org, slots, settings):
    settings.LAUNCH_STALL_S = 0
    slots(1)
    job = submit(org, slots)
    dispatch.allocate(job.pk)
    services.job_terminate(job=job)
    supervision.finalize(job.pk)
    assert state(job) == JobState.TERMINATED
