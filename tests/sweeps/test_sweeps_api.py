"""Sweeps through the API at the database level: validation before anything is created,
the first trials started at once, the next ones as trials end (the jobs' outcome hook),
the cost cap, cancel, and organizations kept apart."""

from __future__ import annotations

import pytest

from apps.finetunes import payloads
from apps.jobs import services as job_services
from apps.jobs import tasks as job_tasks
from apps.jobs.models import Job
from apps.jobs.states import JobState
from apps.sweeps import scheduling
from apps.sweeps.models import Sweep, Trial
from tests.jobs.helpers import PATH_TO, job_body

pytestmark = pytest.mark.django_db

TEMPLATE = {
    "name": "lr-sweep",
    "model": "/models/tiny",
    "dataset": "/data/alpaca.jsonl",
    "dataset_format": "alpaca",
    "max_steps": 4,
}
GRID = {"learning_rate": [1e-3, 3e-3], "max_steps": [2, 4]}


def sweep_body(**overrides) -> dict:
    return {
        "name": "lr x steps",
        "template": TEMPLATE,
        "params": GRID,
        "concurrency": 2,
    } | overrides


def _post(api, project, body, **headers):
    return api.post(f"/api/v1/projects/{project.public_id}/sweeps", body, format="json", **headers)


def _end(job: Job, state: str = JobState.SUCCEEDED) -> None:
    """Move the trial's job to `state` through the one writer, then run the
    `jobs.job_outcome` task its commit queued (here, in this process)."""
    for step in PATH_TO[state]:
        job_services.job_transition(job_id=job.pk, to=step)
    job_tasks.job_outcome(job.pk, state)


def _trial_jobs(sweep: Sweep) -> list[Job | None]:
    return [trial.job for trial in sweep.trials.select_related("job").order_by("index")]


def test_a_grid_sweep_creates_its_trials_and_starts_as_many_as_its_concurrency(
    api_client_for, org, project
):
    response = _post(api_client_for(org), project, sweep_body())

    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["state"], body["status"], body["counts"]) == (
        "running",
        "running",
        {"total": 4, "requested": 2, "pending": 2},
    )
    assert [trial["values"] for trial in body["trials"]] == [
        {"learning_rate": 1e-3, "max_steps": 2},
        {"learning_rate": 1e-3, "max_steps": 4},
        {"learning_rate": 3e-3, "max_steps": 2},
        {"learning_rate": 3e-3, "max_steps": 4},
    ]
    started = [trial["job_id"] for trial in body["trials"]]
    assert started[2:] == [None, None] and all(started[:2])
    jobs = {job.public_id: job for job in Job.objects.filter(public_id__in=started[:2])}
    first = jobs[started[0]]
    assert (first.kind, first.project_id) == ("finetune", project.pk)
    assert first.idempotency_key == f"sweep:{body['id']}:0"
    config = payloads.config_of(first)
    assert (config["learning_rate"], config["max_steps"], config["model"]) == (
        1e-3,
        2,
        "/models/tiny",
    )
    assert payloads.config_of(jobs[started[1]])["max_steps"] == 4


def test_a_sweep_over_the_lora_rank_gives_each_trial_its_rank_and_refuses_a_zero_one(
    api_client_for, org, project
):
    api = api_client_for(org)
    refused = _post(api, project, sweep_body(params={"lora_r": [8, 0]}))
    assert refused.status_code == 400
    assert refused.json()["error"]["param"] == "params.lora_r"

    response = _post(api, project, sweep_body(params={"lora_r": [8, 32]}))

    assert response.status_code == 201, response.json()
    jobs = Job.objects.filter(public_id__in=[t["job_id"] for t in response.json()["trials"]])
    ranks = sorted(payloads.config_of(job)["lora_r"] for job in jobs)
    assert ranks == [8, 32]


@pytest.mark.parametrize(
    ("change", "param"),
    [
        ({"params": {"learning_rate": [1e-3, 0]}}, "params.learning_rate"),
        ({"params": {"max_steps": [2, "many"]}}, "params.max_steps"),
        ({"params": {"learnin_rate": [1e-3]}}, "params.learnin_rate"),
        ({"params": {"limits.max_cost_usd": [1]}}, "params.limits.max_cost_usd"),
        ({"params": {"learning_rate": []}}, "params.learning_rate"),
        ({"params": {"learning_rate": {"min": 1e-4, "max": 1e-3}}}, "params.learning_rate"),
        ({"params": {"seed": list(range(101))}}, "params"),
        ({"template": {**TEMPLATE, "dataset_format": "csvish"}}, "template.dataset_format"),
        ({"method": "random"}, "samples"),
        ({"concurrency": 0}, "concurrency"),
        ({"max_cost_usd": 0}, "max_cost_usd"),
        ({"kind": "serve"}, "kind"),
    ],
    ids=[
        "lr-zero",
        "steps-not-a-number",
        "unknown-field",
        "no-parent-object",
        "no-values",
        "range-in-a-grid",
        "grid-too-large",
        "bad-template",
        "random-without-samples",
        "no-concurrency",
        "zero-cap",
        "unknown-kind",
    ],
)
def test_a_bad_sweep_is_a_400_naming_the_param_and_creates_nothing(
    api_client_for, org, project, change, param
):
    response = _post(api_client_for(org), project, sweep_body(**change))

    assert response.status_code == 400, response.json()
    error = response.json()["error"]
    assert (error["type"], error["param"]) == ("invalid_request", param)
    assert not Sweep.objects.exists()
    assert not Job.objects.exists()


def test_a_bad_value_is_named_with_the_param_in_the_message(api_client_for, org, project):
    response = _post(
        api_client_for(org), project, sweep_body(params={"learning_rate": [1e-3, 5.0]})
    )

    assert response.status_code == 400
    assert response.json()["error"]["message"].startswith("5.0 is not a valid learning_rate")


def test_when_a_trial_ends_the_next_starts_and_never_more_than_the_concurrency_run(
    api_client_for, org, project
):
    body = _post(api_client_for(org), project, sweep_body()).json()
    sweep = Sweep.objects.get(public_id=body["id"])
    first, second, *_ = _trial_jobs(sweep)

    _end(first)
    job_tasks.job_outcome(first.pk, JobState.SUCCEEDED)  # delivered twice

    jobs = _trial_jobs(sweep)
    assert [job is not None for job in jobs] == [True, True, True, False]
    active = [job for job in jobs if job is not None and job.state == JobState.REQUESTED]
    assert len(active) == 2
    assert Job.objects.count() == 3

    _end(second, JobState.FAILED)
    _end(jobs[2])
    jobs = _trial_jobs(sweep)
    scheduling.advance(sweep.pk)  # the beat pass as well: still nothing twice
    assert Job.objects.count() == 4
    _end(jobs[3])

    sweep.refresh_from_db()
    assert (sweep.state, sweep.stop_reason) == (Sweep.State.SUCCEEDED, None)
    assert sweep.ended_at is not None


def test_the_best_trial_is_the_succeeded_one_with_the_lowest_loss(api_client_for, org, project):
    api = api_client_for(org)
    body = _post(api, project, sweep_body(concurrency=4)).json()
    sweep = Sweep.objects.get(public_id=body["id"])
    losses = [0.9, 0.4, 0.1, 0.6]
    for job, loss in zip(_trial_jobs(sweep), losses, strict=True):
        Job.objects.filter(pk=job.pk).update(metric_series={"loss": {"step": 2, "value": loss}})
    jobs = _trial_jobs(sweep)
    _end(jobs[2], JobState.FAILED)  # the lowest loss, but it failed
    for job in (jobs[0], jobs[1], jobs[3]):
        _end(job)

    answer = api.get(f"/api/v1/projects/{project.public_id}/sweeps/{body['id']}").json()

    assert answer["state"] == "succeeded"
    assert answer["counts"] == {"total": 4, "succeeded": 3, "failed": 1}
    assert (answer["best"]["index"], answer["best"]["metric"]) == (1, 0.4)
    assert [trial["best"] for trial in answer["trials"]] == [False, True, False, False]


def test_the_cost_cap_terminates_the_active_trials_and_skips_the_rest(api_client_for, org, project):
    body = _post(api_client_for(org), project, sweep_body(max_cost_usd="0.50")).json()
    sweep = Sweep.objects.get(public_id=body["id"])
    first, second, *_ = _trial_jobs(sweep)
    scheduling.advance(sweep.pk)
    assert Sweep.objects.get(pk=sweep.pk).state == Sweep.State.RUNNING  # nothing spent yet

    Job.objects.filter(pk=first.pk).update(accrued_micros=300_000)
    Job.objects.filter(pk=second.pk).update(accrued_micros=200_000)
    scheduling.advance(sweep.pk)

    sweep.refresh_from_db()
    assert (sweep.state, sweep.stop_reason, sweep.status_label) == (
        "stopped",
        "cost_cap",
        "stopped: cost_cap",
    )
    assert [job.state for job in _trial_jobs(sweep)[:2]] == ["terminated", "terminated"]
    assert {job.reason for job in _trial_jobs(sweep)[:2]} == {scheduling.COST_CAP_REASON}
    assert list(sweep.trials.values_list("state", flat=True)) == [
        "started",
        "started",
        "skipped",
        "skipped",
    ]
    assert Job.objects.count() == 2


def test_cancel_stops_the_sweep_and_is_idempotent(api_client_for, org, project):
    api = api_client_for(org)
    body = _post(api, project, sweep_body()).json()
    url = f"/api/v1/projects/{project.public_id}/sweeps/{body['id']}/cancel"

    first = api.post(url)
    again = api.post(url)

    assert first.status_code == again.status_code == 200
    answer = again.json()
    assert (answer["state"], answer["stop_reason"]) == ("stopped", "cancelled")
    assert answer["counts"] == {"total": 4, "terminated": 2, "skipped": 2}
    assert Job.objects.count() == 2


def test_a_random_sweep_draws_the_same_seeded_values_within_the_ranges(
    api_client_for, org, project
):
    body = sweep_body(
        method="random",
        samples=5,
        seed=7,
        concurrency=1,
        params={
            "learning_rate": {"min": 1e-5, "max": 1e-2, "log": True},
            "max_steps": {"min": 2, "max": 8},
            "seed": [1, 2, 3],
        },
    )
    api = api_client_for(org)
    one = _post(api, project, body).json()
    two = _post(api, project, {**body, "name": "again"}).json()

    values = [trial["values"] for trial in one["trials"]]
    assert values == [trial["values"] for trial in two["trials"]]
    assert len(values) == 5
    for trial in values:
        assert 1e-5 <= trial["learning_rate"] <= 1e-2
        assert isinstance(trial["max_steps"], int) and 2 <= trial["max_steps"] <= 8
        assert trial["seed"] in {1, 2, 3}


def test_a_container_sweep_sets_dotted_paths_in_the_job_body(api_client_for, org, project):
    template = job_body(container={"image": "local", "command": ["true"], "env": {"LR": "1"}})
    response = _post(
        api_client_for(org),
        project,
        {
            "name": "env",
            "kind": "container",
            "template": template,
            "params": {"container.env.LR": ["1", "2"]},
        },
    )

    assert response.status_code == 201, response.json()
    job = Job.objects.get(public_id=response.json()["trials"][0]["job_id"])
    assert (job.kind, job.spec["container"]["env"]["LR"]) == ("container", "1")


def test_a_retried_create_with_the_same_key_answers_the_same_sweep(api_client_for, org, project):
    api = api_client_for(org)
    first = _post(api, project, sweep_body(), HTTP_IDEMPOTENCY_KEY="k1")
    again = _post(api, project, sweep_body(), HTTP_IDEMPOTENCY_KEY="k1")
    other = _post(api, project, sweep_body(concurrency=1), HTTP_IDEMPOTENCY_KEY="k1")

    assert (first.status_code, again.status_code, other.status_code) == (201, 200, 409)
    assert again.json()["id"] == first.json()["id"]
    assert Sweep.objects.count() == 1 and Trial.objects.count() == 4


def test_another_organizations_sweeps_are_not_found(
    api_client_for, org, other_org, project, other_project
):
    body = _post(api_client_for(org), project, sweep_body()).json()
    outsider = api_client_for(other_org)
    base = f"/api/v1/projects/{project.public_id}/sweeps"

    assert outsider.get(f"{base}/{body['id']}").status_code == 404
    assert outsider.post(f"{base}/{body['id']}/cancel").status_code == 404
    assert outsider.get(base).status_code == 404
    mine = f"/api/v1/projects/{other_project.public_id}/sweeps/{body['id']}"
    assert outsider.get(mine).status_code == 404
    assert _post(outsider, project, sweep_body()).status_code == 404
    assert Sweep.objects.get().state == "running"
    listed = api_client_for(org).get(base).json()
    assert [sweep["id"] for sweep in listed["data"]] == [body["id"]]


def test_a_viewer_cannot_create_a_sweep(api_client_for, org, project):
    response = _post(api_client_for(org, role="viewer"), project, sweep_body())

    assert response.status_code == 403
    assert not Sweep.objects.exists()


def test_a_trial_the_api_refuses_records_why_and_the_sweep_goes_on(api_client_for, org, project):
    api = api_client_for(org)
    body = _post(api, project, sweep_body(concurrency=1)).json()
    sweep = Sweep.objects.get(public_id=body["id"])
    org.compute_enabled = False
    org.save(update_fields=["compute_enabled"])

    _end(_trial_jobs(sweep)[0])

    sweep.refresh_from_db()
    trials = list(sweep.trials.order_by("index"))
    assert [trial.state for trial in trials] == ["started", "error", "error", "error"]
    assert trials[1].error == "Compute is not enabled for this organization yet."
    assert trials[1].job is None and Job.objects.count() == 1
    assert sweep.state == "succeeded"


def test_a_trial_over_the_waiting_jobs_limit_stays_pending_until_there_is_room(
    api_client_for, org, project, settings
):
    settings.MAX_WAITING_JOBS_PER_ORG = 1
    body = _post(api_client_for(org), project, sweep_body()).json()
    sweep = Sweep.objects.get(public_id=body["id"])

    assert [trial["state"] for trial in body["trials"]] == [
        "requested",
        "pending",
        "pending",
        "pending",
    ]
    settings.MAX_WAITING_JOBS_PER_ORG = 10
    scheduling.advance(sweep.pk)

    assert [job is not None for job in _trial_jobs(sweep)] == [True, True, False, False]
    assert not sweep.trials.filter(state="error").exists()
