"""Every legal transition works through the one writer; every illegal one raises and
changes nothing."""

import pytest

from apps.jobs import services
from apps.jobs.models import Job, JobCounter, JobEvent
from apps.jobs.states import TRANSITIONS, IllegalTransition, JobState
from tests.jobs.helpers import make_job

pytestmark = pytest.mark.django_db

LEGAL = [(src, dst) for src, targets in TRANSITIONS.items() for dst in sorted(targets)]
ILLEGAL = [
    (src, dst) for src in JobState.values for dst in JobState.values if dst not in TRANSITIONS[src]
]


def test_the_table_matches_the_design():
    s = JobState
    assert TRANSITIONS[s.REQUESTED] == {s.ALLOCATING, s.TERMINATING, s.FAILED}
    assert TRANSITIONS[s.ALLOCATING] == {s.PROVISIONING, s.TERMINATING, s.FAILED}
    assert TRANSITIONS[s.PROVISIONING] == {s.RUNNING, s.TERMINATING, s.PREEMPTED, s.FAILED}
    assert TRANSITIONS[s.RUNNING] == {s.FINALIZING, s.TERMINATING, s.PREEMPTED}
    assert TRANSITIONS[s.FINALIZING] == {s.SUCCEEDED, s.FAILED}
    assert TRANSITIONS[s.PREEMPTED] == {s.REQUESTED, s.TERMINATING, s.FAILED}
    assert TRANSITIONS[s.TERMINATING] == {s.TERMINATED}
    for terminal in (s.SUCCEEDED, s.FAILED, s.TERMINATED):
        assert TRANSITIONS[terminal] == frozenset()


@pytest.mark.parametrize(("src", "dst"), LEGAL)
def test_a_legal_transition_moves_the_job_and_records_an_event(org, src, dst):
    job = make_job(org, state=src)
    events_before = JobEvent.objects.filter(job=job).count()

    moved = services.job_transition(job_id=job.pk, to=dst, reason="because")

    job.refresh_from_db()
    assert (job.state, job.reason) == (dst, "because")
    assert moved.state == dst
    event = JobEvent.objects.filter(job=job).latest("id")
    assert JobEvent.objects.filter(job=job).count() == events_before + 1
    assert (event.type, event.data["from"], event.data["to"]) == ("state_changed", src, dst)
    assert (job.terminal_at is not None) == (dst in {"succeeded", "failed", "terminated"})
    counters = dict(JobCounter.objects.filter(project=job.project).values_list("state", "count"))
    assert counters[dst] == 1
    assert counters.get(src, 0) == (0 if src != dst else 1)


@pytest.mark.parametrize(("src", "dst"), ILLEGAL)
def test_an_illegal_transition_raises_and_changes_nothing(org, src, dst):
    job = make_job(org, state=src)
    before = Job.objects.filter(pk=job.pk).values().get()
    events_before = list(JobEvent.objects.filter(job=job).values_list("id", flat=True))
    counters_before = list(JobCounter.objects.values_list("state", "count").order_by("state"))

    with pytest.raises(IllegalTransition):
        services.job_transition(job_id=job.pk, to=dst)

    assert Job.objects.filter(pk=job.pk).values().get() == before
    assert list(JobEvent.objects.filter(job=job).values_list("id", flat=True)) == events_before
    assert list(JobCounter.objects.values_list("state", "count").order_by("state")) == (
        counters_before
    )


def test_running_stamps_started_at_once(org):
    job = make_job(org, state=JobState.RUNNING)
    first = job.started_at
    assert first is not None
    job = services.job_transition(job_id=job.pk, to=JobState.PREEMPTED)
    job = services.job_transition(job_id=job.pk, to=JobState.REQUESTED)
    for step in (JobState.ALLOCATING, JobState.PROVISIONING, JobState.RUNNING):
        job = services.job_transition(job_id=job.pk, to=step)
    assert job.started_at == first
