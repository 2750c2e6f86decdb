"""The job page and its fragments, as a browser without JavaScript gets them."""

from datetime import UTC, datetime

import pytest

from apps.jobs import services
from apps.jobs.execution import dispatch, supervision
from apps.jobs.live.partials import WINDOW
from apps.jobs.models import Job
from apps.jobs.states import JobState
from apps.jobs.telemetry import ingestion
from tests.jobs.helpers import make_job

pytestmark = pytest.mark.django_db


def _with_output(org, lines: int, **overrides) -> Job:
    job = make_job(org, **overrides)
    attempt = dispatch.allocate(job.pk)
    now = datetime.now(UTC)
    batch = [
        ingestion.IncomingLine(
            i,
            now,
            "user",
            "stderr" if i % 2 else "stdout",
            f"line {i}" if i % 5 else f'{{"step": {i}, "loss": {1 / i}}}',
        )
        for i in range(1, lines + 1)
    ]
    for start in range(0, len(batch), 1000):
        ingestion.ingest(
            attempt=attempt, job=Job.objects.get(pk=job.pk), lines=batch[start : start + 1000]
        )
    return Job.objects.get(pk=job.pk)


def test_the_page_shows_status_metrics_events_logs_and_config(client_for, member, org):
    job = _with_output(org, 20, name="my-run")
    response = client_for(member).get(f"/o/acme/jobs/{job.public_id}/")
    assert response.status_code == 200
    body = response.content.decode()
    assert "my-run" in body
    assert 'data-state="allocating"' in body
    assert 'data-metric="step">20<' in body
    assert body.count('class="grid-row metric-row"') == 4
    assert "provider_allocated" in body
    assert body.count('class="log-line src-user stream-stderr"') == 10
    assert "python:3.11-slim" in body  # the submitted config
    assert f'ws-connect="/ws/jobs/{job.public_id}/"' in body
    assert f'data-seq="{job.live_seq}"' in body
    assert ">Terminate</button>" in body


def test_a_big_job_renders_a_window_with_older_lines_on_demand(client_for, member, org):
    job = _with_output(org, 3 * WINDOW)
    client = client_for(member)
    body = client.get(f"/o/acme/jobs/{job.public_id}/").content.decode()
    assert body.count('class="log-line ') == WINDOW
    assert "Load older lines" in body
    first_shown = int(body.split('class="log-line ')[0].rsplit('id="log-', 1)[1].split('"')[0])
    older = client.get(f"/o/acme/jobs/{job.public_id}/logs/?before={first_shown}")
    assert older.status_code == 200
    older_body = older.content.decode()
    assert older_body.count('class="log-line ') == WINDOW
    assert "Load older lines" in older_body
    assert f'id="log-{first_shown}"' not in older_body


def test_download_log_saves_the_whole_log_as_text(client_for, member, org):
    job = _with_output(org, 3 * WINDOW)
    client = client_for(member)
    page = client.get(f"/o/acme/jobs/{job.public_id}/").content.decode()
    assert f'href="/o/acme/jobs/{job.public_id}/logs.txt" download>Download log' in page
    response = client.get(f"/o/acme/jobs/{job.public_id}/logs.txt")
    assert response.status_code == 200
    assert response["Content-Type"] == "text/plain; charset=utf-8"
    assert response["Content-Disposition"] == f'attachment; filename="{job.public_id}.log"'
    text = b"".join(response).decode()  # the sync test client consumes the async stream
    workload = [line for line in text.splitlines() if line.startswith("line ")]
    assert workload == [f"line {i}" for i in range(1, 3 * WINDOW + 1) if i % 5]


def test_the_catch_up_returns_only_what_is_newer(client_for, member, org):
    job = _with_output(org, 5)
    last_log = job.log_lines.order_by("-id").first().id
    response = client_for(member).get(
        f"/o/acme/jobs/{job.public_id}/live/?after_log={last_log}&after_event=0&after_metric=0"
    )
    body = response.content.decode()
    assert f'data-seq="{job.live_seq}"' in body
    assert "log-line" not in body
    assert "provider_allocated" in body
    assert 'hx-swap-oob="true"' in body


def test_a_failed_job_shows_its_error(client_for, member, org):
    job = make_job(org, state=JobState.PROVISIONING)
    services.job_transition(
        job_id=job.pk,
        to=JobState.FAILED,
        reason="launch_failed",
        error_message="could not start the runner",
    )
    body = client_for(member).get(f"/o/acme/jobs/{job.public_id}/").content.decode()
    assert 'role="alert"' in body
    assert "could not start the runner" in body


def test_cancel_terminates_and_viewers_cannot(client_for, member, viewer, org):
    job = make_job(org)
    assert client_for(viewer).post(f"/o/acme/jobs/{job.public_id}/cancel/").status_code == 403
    assert Job.objects.get(pk=job.pk).state == JobState.REQUESTED
    response = client_for(member).post(f"/o/acme/jobs/{job.public_id}/cancel/")
    assert response.status_code == 302
    job.refresh_from_db()
    assert (job.state, job.reason) == (JobState.TERMINATED, "cancelled")
    htmx = client_for(member).post(f"/o/acme/jobs/{job.public_id}/cancel/", HTTP_HX_REQUEST="true")
    assert htmx.status_code == 204


def _page(client_for, member, job: Job) -> str:
    return client_for(member).get(f"/o/acme/jobs/{job.public_id}/").content.decode()


def test_a_container_job_that_prints_no_metric_has_no_loss_chart_nor_training_words(
    client_for, member, org
):
    body = _page(client_for, member, make_job(org))

    assert '<section class="card" id="loss-card" hidden>' in body
    assert "<h2>Events</h2>" in body and "Training events" not in body


def test_a_container_job_that_prints_metrics_shows_its_curve(client_for, member, org):
    body = _page(client_for, member, _with_output(org, 20))

    assert '<section class="card" id="loss-card">' in body


def test_a_finetune_always_has_its_loss_chart_and_training_events(client_for, member, org):
    job = make_job(org)
    Job.objects.filter(pk=job.pk).update(kind=Job.Kind.FINETUNE)

    body = _page(client_for, member, job)

    assert '<section class="card" id="loss-card">' in body
    assert "<h2>Training events</h2>" in body


def test_one_verb_terminate_for_a_waiting_job_of_any_kind_and_its_reason_says_so(
    client_for, member, org
):
    job = make_job(org)  # requested: waiting to be placed
    Job.objects.filter(pk=job.pk).update(kind=Job.Kind.FINETUNE)
    assert ">Terminate</button>" in _page(client_for, member, job)
    assert ">Cancel</button>" not in _page(client_for, member, job)

    client_for(member).post(f"/o/acme/jobs/{job.public_id}/cancel/")

    assert "Terminated by a user." in _page(client_for, member, job)


def test_an_ended_job_says_cost_and_why_each_attempt_ended_in_words(client_for, member, org):
    job = _with_output(org, 5)
    services.job_transition(job_id=job.pk, to=JobState.PROVISIONING)
    services.job_transition(job_id=job.pk, to=JobState.RUNNING)
    services.job_transition(job_id=job.pk, to=JobState.FINALIZING)
    Job.objects.get(pk=job.pk).attempts.update(exit_code=0)
    supervision.finalize(job.pk)

    body = _page(client_for, member, job)
    assert "<h3>Cost</h3>" in body and "Cost so far" not in body
    assert '<td class="attempt-end" title="exit_code_0">The workload exited with code 0.' in body


def test_the_page_says_where_and_as_whom_the_workload_runs(client_for, member, org):
    job = make_job(org)
    assert '<dd data-fact="runs">—</dd>' in _page(client_for, member, job)  # not launched
    attempt = dispatch.allocate(job.pk)
    attempt.handle = {"container": "ty-x-1", "runtime": "podman", "image": "python:3.11-slim"}
    attempt.save(update_fields=["handle"])

    body = _page(client_for, member, job)

    assert (
        '<dd data-fact="runs">in a podman container of image python:3.11-slim, '
        "on a network of its own</dd>"
    ) in body


@pytest.mark.parametrize("suffix", ["", "live/", "logs/?before=10", "logs.txt"])
def test_another_orgs_job_is_404(client_for, outsider, org, suffix):
    job = make_job(org)
    response = client_for(outsider).get(f"/o/acme/jobs/{job.public_id}/{suffix}")
    assert response.status_code == 404
    response = client_for(outsider).get(f"/o/globex/jobs/{job.public_id}/{suffix}")
    assert response.status_code == 404


def test_the_jobs_tab_lists_filters_and_pages(client_for, member, org, project):
    jobs = [make_job(org, project=project.public_id, name=f"job-{i}") for i in range(30)]
    services.job_terminate(job=jobs[0])
    client = client_for(member)
    body = client.get("/o/acme/projects/vision/").content.decode()
    assert body.count('id="job-row-') == 25
    assert "job-29" in body and "job-4" not in body
    older = body.split('class="older" href="')[1].split('"')[0].replace("&amp;", "&")
    rest = client.get(f"/o/acme/projects/vision/{older}").content.decode()
    assert rest.count('id="job-row-') == 5
    assert "job-0" in rest
    terminated = client.get("/o/acme/projects/vision/?state=terminated").content.decode()
    assert terminated.count('id="job-row-') == 1
    assert f'ws-connect="/ws/projects/{project.public_id}/"' in body
    assert client.get("/o/acme/projects/vision/?cursor=garbage").status_code == 200
