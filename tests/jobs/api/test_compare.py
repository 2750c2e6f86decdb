"""Comparing jobs: `GET /api/v1/compute/jobs/compare`, the compare page and its live region,
the lists' Compare form, and `trainyard compare`. Fine-tunes are created by the jobs
service and their metrics posted through the runner's real log endpoint, as a trainer's
lines arrive; read back as a user would, on real PostgreSQL."""

from __future__ import annotations

import json

import pytest

from apps.finetunes import payloads
from apps.jobs import comparison, services
from apps.jobs.execution import reports, supervision
from apps.jobs.models import Job
from tests.jobs.api.test_metrics import Runner
from tests.jobs.helpers import make_job, running
from trainyard_cli.main import run

pytestmark = pytest.mark.django_db

COMPARE = "/api/v1/compute/jobs/compare"
CONFIG = {
    "model": "/srv/models/tiny",
    "dataset": "./data/train.jsonl",
    "dataset_format": "alpaca",
    "max_samples": None,
    "max_steps": 3,
    "learning_rate": 2e-4,
    "seed": 42,
    "save_steps": 10,
}


def finetune(org, project, name: str, lines: list[str], *, ended: bool = True, **config) -> Job:
    """A fine-tune of `project` with CONFIG and `config` over it whose first attempt printed
    `lines` (posted through the runner endpoint), then exited 0 and was finalized (unless
    `ended` is False: then it is still running)."""
    payload = payloads.job_payload(
        name=name, project_id=project.public_id, config={**CONFIG, **config}
    )
    job = services.job_create(organization=org, payload=payload, kind=Job.Kind.FINETUNE).job
    attempt = running(job)
    Runner(Job.objects.get(pk=job.pk), attempt).send(*lines)
    if ended:
        reports.runner_exited(attempt.pk, 0, confirmed=True)
        supervision.finalize(job.pk)
    return Job.objects.get(pk=job.pk)


@pytest.fixture
def api(api_client_for, org):
    return api_client_for(org)


@pytest.fixture
def pair(org, project) -> tuple[Job, Job]:
    """Two ended fine-tunes that differ only in their learning rate."""
    fast = finetune(
        org,
        project,
        "lr-3e-3",
        [
            '{"step": 1, "loss": 2.0}',
            '{"step": 2, "loss": 1.5, "eval_accuracy": 0.4, "lr": 0.003, "tokens_per_s": 90.0}',
            '{"step": 3, "loss": 1.7, "eval_accuracy": 0.7, "lr": 0.002, "tokens_per_s": 120.0}',
        ],
        learning_rate=0.003,
    )
    slow = finetune(
        org,
        project,
        "lr-1e-3",
        ['{"step": 1, "loss": 2.2}', '{"step": 2, "loss": 1.2}', '{"step": 3, "loss": 1.4}'],
        learning_rate=0.001,
    )
    return fast, slow


def test_two_finetunes_differ_only_in_their_learning_rate(api, pair):
    fast, slow = pair
    response = api.get(COMPARE, {"ids": f"{fast.public_id},{slow.public_id}"})

    assert response.status_code == 200, response.content
    body = response.json()
    assert [job["id"] for job in body["jobs"]] == [fast.public_id, slow.public_id]
    assert body["differences"] == {
        "training.learning_rate": {fast.public_id: 0.003, slow.public_id: 0.001}
    }
    assert body["metric_names"] == ["eval_accuracy", "learning_rate", "loss", "tokens_per_s"]
    first = body["jobs"][0]
    assert first["name"] == "lr-3e-3"
    assert first["state"] == "succeeded"
    assert first["kind"] == "finetune"
    assert first["metrics"]["loss"] == {
        "final": 1.7,
        "final_step": 3,
        "best": 1.5,
        "goal": "min",
        "points": 3,
    }
    # Accuracy is better higher: its best is its highest.
    assert first["metrics"]["eval_accuracy"]["best"] == 0.7
    assert first["metrics"]["eval_accuracy"]["goal"] == "max"
    assert first["metrics"]["tokens_per_s"]["best"] == 120.0
    # A schedule has no best: only where it ended.
    assert first["metrics"]["learning_rate"] == {
        "final": 0.002,
        "final_step": 3,
        "best": None,
        "goal": None,
        "points": 2,
    }
    assert body["jobs"][1]["metrics"]["loss"]["best"] == 1.2
    assert "eval_accuracy" not in body["jobs"][1]["metrics"]
    # The trainer config as its own keys, not the env entry that carries it; no name.
    config = first["config"]
    assert config["training.max_steps"] == 3
    assert config["compute.accelerator"] == "cpu"
    assert not [key for key in config if key.startswith("container.env.") or key == "name"]
    # Its attempt started a minute back: one minute at the local cpu offer's $0.10 an hour.
    assert first["accrued_usd"] == 0.001666
    job = Job.objects.get(pk=fast.pk)
    assert first["duration_s"] == (job.terminal_at - job.started_at).total_seconds()


def test_a_nan_is_a_final_value_of_null_never_the_best_and_a_gap_on_the_chart(
    api, client_for, member, org, project, pair
):
    fast, _ = pair
    diverged = finetune(
        org, project, "diverged", ['{"step": 1, "loss": 3.0}', '{"step": 2, "loss": NaN}']
    )
    ids = f"{fast.public_id},{diverged.public_id}"

    body = api.get(COMPARE, {"ids": ids}).json()
    region = client_for(member).get(f"/o/{org.slug}/jobs/compare/live/", {"ids": ids})

    loss = body["jobs"][1]["metrics"]["loss"]
    assert (loss["final"], loss["final_step"], loss["best"], loss["points"]) == (None, 2, 3.0, 2)
    assert region.context["chart"]["jobs"][1]["points"] == [[1, 3.0], [2, None]]


def test_ids_may_also_come_as_a_repeated_parameter(api, pair):
    fast, slow = pair
    response = api.get(f"{COMPARE}?ids={slow.public_id}&ids={fast.public_id}")

    assert response.status_code == 200, response.content
    assert [job["id"] for job in response.json()["jobs"]] == [slow.public_id, fast.public_id]


def test_container_jobs_differ_in_their_env_and_command(api, org):
    one = make_job(org, name="a", container={"image": "local", "command": ["true"]})
    two = make_job(
        org, name="b", container={"image": "local", "command": ["false"], "env": {"SEED": "7"}}
    )

    body = api.get(COMPARE, {"ids": f"{one.public_id},{two.public_id}"}).json()

    assert body["differences"] == {
        "container.command": {one.public_id: ["true"], two.public_id: ["false"]},
        "container.env.SEED": {one.public_id: None, two.public_id: "7"},
    }
    assert body["metric_names"] == []
    assert body["jobs"][0]["duration_s"] is None  # never started


@pytest.mark.parametrize(
    "ids, message",
    [
        ("", "Pick at least 2 jobs to compare."),
        ("job_aaaaaaaaaaaaaaaa", "Pick at least 2 jobs to compare."),
        (",".join(f"job_{n:016d}" for n in range(11)), "Compare at most 10 jobs at once."),
        ("job_aaaaaaaaaaaaaaaa,job_aaaaaaaaaaaaaaaa", "A job is listed twice."),
        ("job_aaaaaaaaaaaaaaaa,../etc", "'../etc' is not a job id."),
    ],
    ids=["none", "one", "eleven", "twice", "not-an-id"],
)
def test_bad_ids_are_a_400_naming_the_parameter(api, ids, message):
    response = api.get(COMPARE, {"ids": ids})

    assert response.status_code == 400
    assert response.json() == {
        "error": {"type": "invalid_request", "message": message, "param": "ids"}
    }


def test_another_organizations_job_reads_as_a_missing_one(api, pair, other_org):
    fast, _ = pair
    theirs = make_job(other_org, name="theirs")
    missing = "job_0000000000000000"

    foreign = api.get(COMPARE, {"ids": f"{fast.public_id},{theirs.public_id}"})
    absent = api.get(COMPARE, {"ids": f"{fast.public_id},{missing}"})

    assert foreign.status_code == absent.status_code == 404
    assert foreign.json()["error"]["type"] == absent.json()["error"]["type"] == "not_found"
    assert foreign.json()["error"]["message"].replace(theirs.public_id, "ID") == (
        absent.json()["error"]["message"].replace(missing, "ID")
    )
    assert "theirs" not in foreign.content.decode()


# -- the page ------------------------------------------------------------------------------


def test_the_page_shows_the_difference_metrics_and_costs(client_for, member, org, pair):
    fast, slow = pair
    page = client_for(member).get(
        f"/o/{org.slug}/jobs/compare/", {"ids": f"{fast.public_id},{slow.public_id}"}
    )

    assert page.status_code == 200
    html = page.content.decode()
    assert html.count('<tr data-key="') == 1
    assert '<tr data-key="training.learning_rate">' in html
    assert ">3e-3</td>" in html and ">1e-3</td>" in html
    assert '<tr data-metric="loss">' in html and '<tr data-metric="eval_accuracy">' in html
    assert html.count('<td><span class="money" title="$0.001666">$0.002</span></td>') == 2
    # The chart's points: loss (the default metric) of both jobs, in the order picked.
    chart = page.context["chart"]
    assert chart["metric"] == "loss"
    assert [job["points"] for job in chart["jobs"]] == [
        [[1, 2.0], [2, 1.5], [3, 1.7]],
        [[1, 2.2], [2, 1.2], [3, 1.4]],
    ]
    assert 'id="compare-series"' in html
    # Every job ended: the live region does not poll.
    assert "hx-trigger" not in html.split('id="compare-live"')[1].split(">")[0]


def test_the_live_region_polls_while_a_job_runs_and_follows_the_picked_metric(
    client_for, member, org, project, pair
):
    fast, _ = pair
    running = finetune(
        org, project, "still-running", ['{"step": 1, "loss": 3.0}'], ended=False, seed=7
    )
    ids = f"{fast.public_id},{running.public_id}"
    client = client_for(member)

    region = client.get(
        f"/o/{org.slug}/jobs/compare/live/", {"ids": ids, "metric": "eval_accuracy"}
    )

    assert region.status_code == 200
    html = region.content.decode()
    assert 'hx-trigger="every 5s"' in html
    assert region.context["chart"]["metric"] == "eval_accuracy"
    assert [job["points"] for job in region.context["chart"]["jobs"]] == [
        [[2, 0.4], [3, 0.7]],
        [],
    ]
    assert '<tr data-key="training.seed">' in html


def test_a_long_series_is_drawn_from_an_even_sample_of_its_points(
    client_for, member, org, project, pair, monkeypatch
):
    fast, slow = pair
    monkeypatch.setattr(comparison, "CHART_MAX_POINTS", 2)  # 3 points: every other one

    region = client_for(member).get(
        f"/o/{org.slug}/jobs/compare/live/", {"ids": f"{fast.public_id},{slow.public_id}"}
    )

    assert [job["points"] for job in region.context["chart"]["jobs"]] == [
        [[1, 2.0], [3, 1.7]],
        [[1, 2.2], [3, 1.4]],
    ]


def test_the_page_refuses_bad_picks_and_hides_other_organizations_jobs(
    client_for, member, org, pair, other_org
):
    fast, _ = pair
    theirs = make_job(other_org, name="theirs")
    client = client_for(member)

    one = client.get(f"/o/{org.slug}/jobs/compare/", {"ids": fast.public_id})
    foreign = client.get(
        f"/o/{org.slug}/jobs/compare/", {"ids": f"{fast.public_id},{theirs.public_id}"}
    )
    live = client.get(f"/o/{org.slug}/jobs/compare/live/", {"ids": fast.public_id})

    assert one.status_code == 400
    assert "Pick at least 2 jobs to compare." in one.content.decode()
    assert foreign.status_code == 404
    assert live.status_code == 400


def test_an_outsider_cannot_open_the_organizations_compare_page(client_for, outsider, org, pair):
    fast, slow = pair
    page = client_for(outsider).get(
        f"/o/{org.slug}/jobs/compare/", {"ids": f"{fast.public_id},{slow.public_id}"}
    )

    assert page.status_code == 404


def test_both_jobs_lists_offer_a_checkbox_per_job_and_the_compare_form(
    client_for, member, org, project, pair
):
    fast, _ = pair
    client = client_for(member)
    box = f'name="ids" value="{fast.public_id}" form="compare-form"'
    compare_url = f"/o/{org.slug}/jobs/compare/"

    for url in (f"/o/{org.slug}/jobs/", f"/o/{org.slug}/projects/{project.slug}/"):
        html = client.get(url).content.decode()
        assert box in html, url
        form = f'id="compare-form" class="compare-form" method="get" action="{compare_url}"'
        assert form in html, url


# -- the CLI -------------------------------------------------------------------------------


@pytest.fixture
def cli(cli_transport):
    """Run a `trainyard` command line against this test's app; (exit code, stdout+stderr)."""

    def invoke(capsys, *argv: str) -> tuple[int, str]:
        code = run(list(argv), transport=cli_transport)
        captured = capsys.readouterr()
        return code, captured.out + captured.err

    return invoke


def test_the_cli_prints_the_differences_and_final_and_best_metrics(cli, capsys, pair):
    fast, slow = pair

    code, out = cli(capsys, "compare", fast.public_id, slow.public_id)

    assert code == 0, out
    lines = [" ".join(line.replace("│", " ").split()) for line in out.splitlines()]
    assert "training.learning_rate 0.003 0.001" in lines
    assert "loss 1.7 / 1.5 1.4 / 1.2" in lines
    assert "eval_accuracy 0.7 / 0.7 -" in lines
    assert "learning_rate 0.002 -" in lines  # a schedule: where it ended, no best
    assert any(line.startswith(f"{fast.public_id} lr-3e-3 succeeded") for line in lines)


def test_the_cli_json_is_the_apis_and_a_bad_pick_exits_2(cli, capsys, pair):
    fast, slow = pair

    code, out = cli(capsys, "compare", fast.public_id, slow.public_id, "--json")
    assert code == 0
    assert set(json.loads(out)) == {"jobs", "differences", "metric_names"}

    code, out = cli(capsys, "compare", fast.public_id)
    assert code == 2
    assert "Pick at least 2 jobs to compare." in out
