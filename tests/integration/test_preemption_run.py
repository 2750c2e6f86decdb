"""Preemption for real: a web server, a Celery worker and beat, runner processes and the
trainer on a tiny model, on a one-slot local offer of an accelerator of the test's own (so
nothing else competes for the slot)."""

from __future__ import annotations

import itertools
import os
import signal
import uuid
from types import SimpleNamespace

import pytest
import requests
from django.conf import settings
from django.test import Client

from apps.finetunes.payloads import config_of
from apps.jobs.models import Artifact, Attempt, Job, JobEvent, MetricPoint
from tests.factories import ProjectFactory, UserFactory
from tests.integration.conftest import TERMINAL
from tests.integration.held_trainer import hold_at_checkpoint, release_when_signalled
from tests.integration.stack import wait_for
from tests.trainer.conftest import start_trainer

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

MAX_STEPS = 40
# The displaced fine-tune is held still at its step-8 checkpoint until its stop order reaches
# it (tests/integration/held_trainer.py): the standard job is certain to find it training.
DISPLACED_STEPS = 40
SAVE_STEPS = 4


@pytest.fixture
def operator(api):
    """A staff user's signed-in session (operator rights never come from an API key)."""
    browser = Client()
    browser.force_login(UserFactory(is_staff=True))
    session = requests.Session()
    session.cookies.set(
        settings.SESSION_COOKIE_NAME, browser.cookies[settings.SESSION_COOKIE_NAME].value
    )
    csrf = "operatorcsrftoken0123456789abcde"  # any 32 letters and digits, cookie and header
    session.cookies.set(settings.CSRF_COOKIE_NAME, csrf)
    session.headers["X-CSRFToken"] = csrf
    return SimpleNamespace(base=api.base, session=session)


def submit(api, solo: str, *, priority: str, code: str, name: str = "job") -> str:
    """A container job running `python -c code` on the one-slot offer."""
    response = api.session.post(
        f"{api.base}/api/v1/compute/jobs",
        json={
            "name": name,
            "priority_class": priority,
            "compute": {"accelerator": solo, "gpu_count": 1, "ephemeral_disk_gb": 1},
            "container": {"image": "local", "command": ["python", "-c", code]},
        },
        headers={"Idempotency-Key": uuid.uuid4().hex},
        timeout=10,
    )
    assert response.status_code == 201, response.text
    return response.json()["id"]


def submit_finetune(
    api,
    project,
    solo,
    tiny_model,
    demo_data,
    *,
    priority: str,
    max_steps: int = MAX_STEPS,
    from_hub: tuple[str, str] | None = None,
) -> str:
    """`from_hub`: (model, dataset) hub ids instead of the tiny model's and data's paths."""
    model, dataset = from_hub or (str(tiny_model), str(demo_data["alpaca"]))
    response = api.session.post(
        f"{api.base}/api/v1/projects/{project.public_id}/finetunes",
        json={
            "name": "tiny-lora",
            "model": model,
            "dataset": dataset,
            "dataset_format": "alpaca",
            "max_steps": max_steps,
            "save_steps": SAVE_STEPS,
            "learning_rate": 0.003,
            "priority_class": priority,
            "compute": {"accelerator": solo, "gpu_count": 1, "ephemeral_disk_gb": 1},
        },
        headers={"Idempotency-Key": uuid.uuid4().hex},
        timeout=10,
    )
    assert response.status_code == 201, response.text
    return response.json()["id"]


def checkpoint_uploaded(job_id: str, at_least: int) -> bool:
    return Artifact.objects.filter(
        job__public_id=job_id, kind="checkpoint", step__gte=at_least
    ).exists()


def event_types(api, job_id: str) -> list[str]:
    return [event["type"] for event in api.events(job_id)]


def final_curve(job_id: str) -> dict[int, float]:
    """The loss curve as the job page and API show it: superseded points left out."""
    points = MetricPoint.objects.filter(
        job__public_id=job_id, loss__isnull=False, superseded=False
    ).order_by("step", "id")
    steps = [point.step for point in points]
    assert len(steps) == len(set(steps)), f"a step counted twice: {steps}"
    return {point.step: point.loss for point in points}


def points_and_lines(job_id: str) -> str:
    """What to look at when a curve is wrong: every point, and the user lines near the end."""
    from apps.jobs.models import LogLine

    points = MetricPoint.objects.filter(job__public_id=job_id).order_by("id")
    lines = LogLine.objects.filter(job__public_id=job_id, source="user").order_by("-id")[:40]
    return "\n".join(
        [f"{p.attempt}:{p.step} loss={p.loss} superseded={p.superseded}" for p in points]
        + [f"{line.attempt}| {line.message[:200]}" for line in reversed(lines)]
    )


def assert_attempts_never_overlap(job_id: str) -> None:
    attempts = list(Attempt.objects.filter(job__public_id=job_id).order_by("number"))
    assert [a.number for a in attempts] == list(range(1, len(attempts) + 1))
    for earlier, later in itertools.pairwise(attempts):
        assert earlier.ended_at is not None and earlier.ended_at <= later.allocated_at
    assert sum(1 for a in attempts if a.ended_at is None) == 0


def test_a_standard_job_displaces_a_preemptible_finetune_which_resumes_and_loses_nothing(
    api, compute_org, solo, tiny_model, demo_data, tmp_path
):
    project = ProjectFactory(organization=compute_org)
    finetune = submit_finetune(
        api, project, solo, tiny_model, demo_data, priority="preemptible", max_steps=DISPLACED_STEPS
    )
    # The uninterrupted run with the same config and seed, meanwhile, for the final loss.
    baseline = start_trainer(config_of(Job.objects.get(public_id=finetune)), tmp_path / "base")
    held = hold_at_checkpoint(finetune, 8)

    standard = submit(api, solo, priority="standard", code="print('standard work done')")
    release_when_signalled(held)
    done = api.wait_state(standard, TERMINAL, timeout=120)
    assert done["state"] == "succeeded", api.events(standard)
    finished = api.wait_state(finetune, TERMINAL, timeout=300)
    assert finished["state"] == "succeeded", [m["message"] for m in api.logs(finetune)][-30:]

    # It went running → preempted (preempted_by the standard job) → requested again.
    changes = [e["data"] for e in api.events(finetune) if e["type"] == "state_changed"]
    preempted = next(c for c in changes if c["to"] == "preempted")
    assert preempted["from"] == "running"
    assert preempted["reason"] == "preempted_by" and preempted["preempted_by"] == standard
    assert any(c["from"] == "preempted" and c["to"] == "requested" for c in changes)
    first, second = finished["attempts"]
    assert first["end_reason"] == "preempted" and first["preempted_by"] == standard
    assert second["end_reason"] == "exit_code_0"
    # The standard job ran in between, in the slot the fine-tune gave up.
    standard_attempt = Attempt.objects.get(job__public_id=standard)
    assert Attempt.objects.get(job__public_id=finetune, number=1).ended_at <= (
        standard_attempt.allocated_at
    )
    assert (
        standard_attempt.ended_at
        <= Attempt.objects.get(job__public_id=finetune, number=2).allocated_at
    )

    # It resumed from its newest checkpoint: the metric steps go on from there, each once.
    resumed = JobEvent.objects.get(job__public_id=finetune, type="resumed_from_checkpoint")
    newest = Artifact.objects.filter(job__public_id=finetune, attempt=1, kind="checkpoint")
    assert resumed.data["step"] == max(a.step for a in newest) >= 8
    curve = final_curve(finetune)
    assert sorted(curve) == list(range(1, DISPLACED_STEPS + 1)), points_and_lines(finetune)
    second_steps = MetricPoint.objects.filter(
        job__public_id=finetune, attempt=2, loss__isnull=False
    ).values_list("step", flat=True)
    if resumed.data["step"] < DISPLACED_STEPS:
        assert min(second_steps) == resumed.data["step"] + 1
    else:
        # On a busy machine the order can land after the last step's checkpoint (the tiny
        # model trains a step in milliseconds): the resumed attempt then trains nothing.
        assert not second_steps

    # And it ends where an uninterrupted run with the same seed ends.
    uninterrupted = baseline.wait()
    assert uninterrupted.returncode == 0, uninterrupted.stderr[-2000:]
    assert curve[DISPLACED_STEPS] == pytest.approx(
        uninterrupted.losses()[DISPLACED_STEPS], rel=1e-2
    )


def assert_reclaimed_then_resumed_to_the_end(api, finetune: str, steps: int) -> None:
    """The fine-tune's first attempt was reclaimed, the next resumed from its newest
    checkpoint, and the job succeeded with each step 1..`steps` once on its curve."""
    finished = api.wait_state(finetune, TERMINAL, timeout=300)
    assert finished["state"] == "succeeded", [m["message"] for m in api.logs(finetune)][-30:]
    changes = [e["data"] for e in api.events(finetune) if e["type"] == "state_changed"]
    assert any(c["to"] == "preempted" and c["reason"] == "reclaimed" for c in changes)
    assert finished["attempts"][0]["end_reason"] == "reclaimed"
    uploaded = Artifact.objects.filter(job__public_id=finetune, attempt=1, kind="checkpoint")
    resumed = JobEvent.objects.get(job__public_id=finetune, type="resumed_from_checkpoint")
    assert resumed.data["step"] == max(a.step for a in uploaded)
    assert sorted(final_curve(finetune)) == list(range(1, steps + 1))
    assert_attempts_never_overlap(finetune)


def test_a_runner_killed_outright_is_reclaimed_and_resumes_from_its_last_upload(
    api, compute_org, solo, tiny_model, demo_data
):
    project = ProjectFactory(organization=compute_org)
    finetune = submit_finetune(api, project, solo, tiny_model, demo_data, priority="standard")
    wait_for(lambda: checkpoint_uploaded(finetune, 4), timeout=240, what="a step-4 checkpoint")
    handle = Attempt.objects.get(job__public_id=finetune, number=1).handle
    os.killpg(handle["pgid"], signal.SIGKILL)  # no grace, no exit record

    assert_reclaimed_then_resumed_to_the_end(api, finetune, MAX_STEPS)


# Attempt 1 waits to be reclaimed; later attempts finish at once.
RESTARTABLE = """
import os, sys, time
print(f"starting attempt {os.environ['TRAINYARD_ATTEMPT']} from the beginning", flush=True)
if os.environ["TRAINYARD_ATTEMPT"] == "1":
    time.sleep(600)
"""


def test_a_reclaimed_container_job_without_checkpoints_restarts_from_the_beginning(
    api, operator, solo
):
    job_id = submit(api, solo, priority="preemptible", code=RESTARTABLE)
    api.wait_state(job_id, "running", timeout=60)
    wait_for(
        lambda: any("attempt 1" in line["message"] for line in api.logs(job_id)),
        timeout=30,
        what="attempt 1's first line",
    )
    response = operator.session.post(f"{operator.base}/api/v1/operator/jobs/{job_id}/reclaim")
    assert response.status_code == 202, response.text

    finished = api.wait_state(job_id, TERMINAL, timeout=90)
    assert finished["state"] == "succeeded"
    assert finished["preemption_count"] == 1
    types = event_types(api, job_id)
    assert "reclaim_requested" in types and "restarted_from_beginning" in types
    restart = next(e for e in api.events(job_id) if e["type"] == "restarted_from_beginning")
    assert "from the beginning" in restart["message"]
    user_lines = [line["message"] for line in api.logs(job_id, source="user")]
    assert "starting attempt 1 from the beginning" in user_lines
    assert "starting attempt 2 from the beginning" in user_lines
    assert [a["end_reason"] for a in finished["attempts"]] == ["reclaimed", "exit_code_0"]
    # Each attempt is billed for its own minutes only.
    assert sum(a["billed_usd"] for a in finished["attempts"]) == pytest.approx(
        finished["accrued_usd"]
    )


def test_a_job_reclaimed_more_often_than_the_cap_fails_too_many_preemptions(api, operator, solo):
    cap = 2  # PREEMPTION_MAX_PER_JOB in the stack's environment
    job_id = submit(api, solo, priority="preemptible", code="import time; time.sleep(600)")
    for number in range(1, cap + 2):
        wait_for(
            lambda n=number: (
                (job := api.job(job_id))["state"] == "running" and len(job["attempts"]) == n
            ),
            timeout=60,
            what=f"attempt {number} running",
        )
        wait_for(
            # Started, and its handle recorded: the runner may report `started` before
            # dispatch has saved the handle a reclaim needs.
            lambda n=number: (
                Attempt.objects.filter(job__public_id=job_id, number=n, started_at__isnull=False)
                .exclude(handle={})
                .exists()
            ),
            timeout=30,
            what=f"attempt {number}'s workload started",
        )
        response = operator.session.post(f"{operator.base}/api/v1/operator/jobs/{job_id}/reclaim")
        assert response.status_code == 202, response.text

    finished = api.wait_state(job_id, TERMINAL, timeout=60)
    assert finished["state"] == "failed"
    assert finished["reason"] == "too_many_preemptions"
    assert finished["preemption_count"] == cap + 1
    assert len(finished["attempts"]) == cap + 1
    assert_attempts_never_overlap(job_id)


def test_a_worker_killed_during_a_preemption_leaves_one_consistent_state(api, stack, solo):
    victim = submit(api, solo, priority="preemptible", code=RESTARTABLE, name="victim")
    api.wait_state(victim, "running", timeout=60)
    standard = submit(api, solo, priority="standard", code="print('standard')")
    wait_for(
        lambda: "preemption_requested" in event_types(api, victim),
        timeout=60,
        what="the victim to be told to stop",
    )
    stack.procs["worker"].stop(signal.SIGKILL)
    try:
        # Meanwhile the runner obeys through the web server: the victim is preempted, and
        # the slot it freed is held for the standard job.
        api.wait_state(victim, "preempted", timeout=60)
    finally:
        stack.start_worker()

    assert api.wait_state(standard, TERMINAL, timeout=90)["state"] == "succeeded"
    finished = api.wait_state(victim, TERMINAL, timeout=90)
    assert finished["state"] == "succeeded"
    for job_id in (victim, standard):
        assert_attempts_never_overlap(job_id)
    assert len(finished["attempts"]) == 2
    # Never two jobs in the one slot: the standard job ran between the victim's attempts.
    first, second = Attempt.objects.filter(job__public_id=victim).order_by("number")
    ran = Attempt.objects.get(job__public_id=standard)
    assert first.ended_at <= ran.allocated_at and ran.ended_at <= second.allocated_at
