"""A workload's `tracker_run` line (the trainer prints one per W&B or MLflow run) becomes the
job's `tracker_run` event, and the job page links to the run. Lines are posted through the
real runner endpoint; the page is read as a browser without JavaScript gets it."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from django.test import Client

from apps.jobs import services
from apps.jobs.events import JobEventType
from apps.jobs.execution import dispatch
from apps.jobs.execution.tokens import token_for
from apps.jobs.live import partials
from apps.jobs.models import Job, JobEvent
from apps.jobs.states import JobState
from tests.jobs.helpers import make_job

pytestmark = pytest.mark.django_db

WANDB_URL = "https://wandb.ai/acme/trainyard/runs/k3x9"


def tracker_line(tracker: str, run_id: str, url: str | None) -> str:
    return json.dumps({"type": "tracker_run", "tracker": tracker, "run_id": run_id, "url": url})


def post_lines(job: Job, attempt, messages: list[str]):
    client = Client(HTTP_AUTHORIZATION=f"Bearer {token_for(attempt.token_nonce)}")
    now = datetime.now(UTC).isoformat()
    lines = [
        {"seq": seq, "ts": now, "source": "user", "stream": "stdout", "message": message}
        for seq, message in enumerate(messages, start=1)
    ]
    return client.post(
        f"/api/v1/runner/jobs/{job.public_id}/logs",
        {"lines": lines},
        content_type="application/json",
    )


@pytest.fixture
def running_job(org):
    job = make_job(org, name="lora-run")
    attempt = dispatch.allocate(job.pk)
    services.job_transition(job_id=job.pk, to=JobState.PROVISIONING)
    return Job.objects.get(pk=job.pk), attempt


def test_the_job_page_links_to_the_runs_the_trainer_reported(running_job, client_for, member):
    job, attempt = running_job
    batch = [
        "trainer: read 64 alpaca rows",
        tracker_line("wandb", "k3x9", WANDB_URL),
        tracker_line("mlflow", "6f1c0ffee", None),
    ]
    assert post_lines(job, attempt, batch).status_code == 200
    # The runner sends a batch again when it missed the answer: still one event per run.
    assert post_lines(job, attempt, batch).status_code == 200

    events = JobEvent.objects.filter(job=job, type=JobEventType.TRACKER_RUN).order_by("id")
    assert [event.data for event in events] == [
        {"tracker": "wandb", "run_id": "k3x9", "url": WANDB_URL},
        {"tracker": "mlflow", "run_id": "6f1c0ffee", "url": None},
    ]
    response = client_for(member).get(f"/o/acme/jobs/{job.public_id}/")
    assert response.status_code == 200
    body = response.content.decode()
    assert f'<a href="{WANDB_URL}" target="_blank" rel="noopener noreferrer"' in body
    assert "W&amp;B run ↗</a>" in body
    # A file store has no page: the run id is shown instead of a link.
    assert "MLflow run <code>6f1c0ffee</code>" in body
    # A page that missed the push gets the same links in its catch-up.
    catch_up = partials.render_catch_up(job, after_event=0, after_log=0, after_metric=0)
    assert 'id="tracker-runs" class="tracker-runs" hx-swap-oob="true"' in catch_up
    assert f'href="{WANDB_URL}"' in catch_up


def test_a_line_naming_no_showable_run_links_nothing(running_job, client_for, member):
    job, attempt = running_job
    batch = [
        tracker_line("wandb", "r1", "javascript:alert(1)"),
        tracker_line("comet", "r2", "https://comet.example/r2"),
        tracker_line("mlflow", "<b>r3</b>", "https://mlflow.example/#/experiments/1/runs/r3"),
        '{"type": "tracker_run", "tracker": "mlflow"}',
    ]
    assert post_lines(job, attempt, batch).status_code == 200

    events = JobEvent.objects.filter(job=job, type=JobEventType.TRACKER_RUN)
    assert [event.data for event in events] == [{"tracker": "wandb", "run_id": "r1", "url": None}]
    body = client_for(member).get(f"/o/acme/jobs/{job.public_id}/").content.decode()
    assert "javascript:alert" not in body.split('id="tracker-runs"')[1].split("</p>")[0]
    assert "W&amp;B run <code>r1</code>" in body
    assert "comet.example" not in body.split('id="tracker-runs"')[1].split("</p>")[0]


def test_a_job_without_tracker_runs_hides_the_links(running_job, client_for, member):
    job, _ = running_job
    body = client_for(member).get(f"/o/acme/jobs/{job.public_id}/").content.decode()
    assert '<p id="tracker-runs" class="tracker-runs" hidden>' in body


def test_another_orgs_job_page_is_a_404(running_job, client_for, outsider):
    job, attempt = running_job
    post_lines(job, attempt, [tracker_line("wandb", "k3x9", WANDB_URL)])
    response = client_for(outsider).get(f"/o/acme/jobs/{job.public_id}/")
    assert response.status_code == 404
    assert WANDB_URL not in response.content.decode()
