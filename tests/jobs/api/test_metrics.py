"""`GET /api/v1/compute/jobs/{id}/metrics` and the job's `latest_metrics`: log lines posted
through the runner's real endpoint, read back as a user would, on real PostgreSQL."""

from __future__ import annotations

import base64
import math
from datetime import UTC, datetime

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from apps.core.pagination import encode_cursor
from apps.jobs import services
from apps.jobs.execution import dispatch, reports
from apps.jobs.execution.tokens import token_for
from apps.jobs.models import Attempt, Job
from apps.jobs.states import JobState
from tests.jobs.helpers import make_job, running
from tests.jobs.helpers import submit_on as submit

pytestmark = pytest.mark.django_db


class Runner:
    """The runner of one attempt, posting log batches as the real one does."""

    def __init__(self, job: Job, attempt: Attempt) -> None:
        self.job = job
        self.client = Client(HTTP_AUTHORIZATION=f"Bearer {token_for(attempt.token_nonce)}")
        self.seq = 0

    def send(self, *messages: str) -> None:
        lines = []
        for message in messages:
            self.seq += 1
            lines.append(
                {
                    "seq": self.seq,
                    "ts": datetime.now(UTC).isoformat(),
                    "source": "user",
                    "stream": "stdout",
                    "message": message,
                }
            )
        response = self.client.post(
            f"/api/v1/runner/jobs/{self.job.public_id}/logs",
            {"lines": lines},
            content_type="application/json",
        )
        assert response.status_code == 200, response.content


def first_runner(org) -> Runner:
    job = make_job(org)
    attempt = dispatch.allocate(job.pk)
    services.job_transition(job_id=job.pk, to=JobState.PROVISIONING)
    return Runner(Job.objects.get(pk=job.pk), attempt)


@pytest.fixture
def api(api_client_for, org):
    return api_client_for(org)


def metrics(api, job: Job, **params) -> dict:
    response = api.get(f"/api/v1/compute/jobs/{job.public_id}/metrics", params)
    assert response.status_code == 200, response.content
    return response.json()


def series(api, job: Job, name: str) -> list[tuple[int, float | None]]:
    """Every point of one series, walked page by page."""
    points, cursor = [], None
    while True:
        body = metrics(api, job, name=name, limit=500, **({"cursor": cursor} if cursor else {}))
        points += [(point["step"], point["value"]) for point in body["data"]]
        cursor = body["next_cursor"]
        if cursor is None:
            return points


def latest(body: dict) -> dict[str, tuple[int, float | None]]:
    points = {item["name"]: item["latest"] for item in body["names"]}
    return {name: (point["step"], point["value"]) for name, point in points.items()}


NANOGPT = [
    "step 0: train loss 4.1000, val loss 4.2000",
    *[f"iter {step}: loss {4 - step * 0.07:.4f}, time 12.50ms, mfu -100.00%" for step in range(20)],
    "step 20: train loss 2.6100, val loss 2.6400",
    "saving checkpoint to out",
    "iter 20: loss 2.5900, time 12.00ms, mfu 11.00%",
]


def test_nanogpt_evaluation_lines_are_their_own_series_not_a_second_loss(api, org):
    runner = first_runner(org)
    runner.send(*NANOGPT)

    loss = series(api, runner.job, "loss")
    assert [step for step, _ in loss] == list(range(21))  # one point per step
    assert loss[-1] == (20, 2.59)
    assert 2.61 not in [value for _, value in loss]
    assert series(api, runner.job, "train_loss") == [(0, 4.1), (20, 2.61)]
    assert series(api, runner.job, "val_loss") == [(0, 4.2), (20, 2.64)]

    body = metrics(api, runner.job)
    assert latest(body) == {
        "loss": (20, 2.59),
        "mfu_pct": (20, 11.0),
        "time_ms": (20, 12.0),
        "train_loss": (20, 2.61),
        "val_loss": (20, 2.64),
    }
    assert body["total"] == 21 + 2 + 2 + 21 + 1  # loss, train_loss, val_loss, time_ms, mfu_pct
    job = api.get(f"/api/v1/compute/jobs/{runner.job.public_id}").json()
    assert job["latest_metrics"] == {
        "loss": 2.59,
        "mfu_pct": 11.0,
        "time_ms": 12.0,
        "train_loss": 2.61,
        "val_loss": 2.64,
    }


HUGGING_FACE = [
    "{'loss': 2.5, 'grad_norm': 1.25, 'learning_rate': 0.0002, 'epoch': 0.5}",
    "{'loss': 2.3, 'grad_norm': 1.0, 'learning_rate': 0.00015, 'epoch': 1.0}",
    "{'eval_loss': 2.4, 'eval_runtime': 0.5, 'eval_samples_per_second': 200.0, 'epoch': 1.0}",
    "{'loss': 2.1, 'grad_norm': 0.75, 'learning_rate': 0.0001, 'epoch': 1.5}",
    "{'loss': 1.9, 'grad_norm': 0.5, 'learning_rate': 0.00005, 'epoch': 2.0}",
    "{'eval_loss': 2.2, 'eval_runtime': 0.5, 'eval_samples_per_second': 210.0, 'epoch': 2.0}",
    "{'train_runtime': 12.5, 'train_samples_per_second': 40.0, 'train_loss': 2.2, 'epoch': 2.0}",
]


def test_hugging_face_eval_dicts_are_eval_series_at_the_step_they_evaluate(api, org):
    runner = first_runner(org)
    runner.send(*HUGGING_FACE[:3])
    runner.send(*HUGGING_FACE[3:])  # the step count carries over from batch to batch

    assert series(api, runner.job, "loss") == [(1, 2.5), (2, 2.3), (3, 2.1), (4, 1.9)]
    assert series(api, runner.job, "eval_loss") == [(2, 2.4), (4, 2.2)]
    assert series(api, runner.job, "eval_samples_per_second") == [(2, 200.0), (4, 210.0)]
    assert series(api, runner.job, "epoch") == [(1, 0.5), (2, 1.0), (3, 1.5), (4, 2.0)]
    assert series(api, runner.job, "train_loss") == [(4, 2.2)]
    assert series(api, runner.job, "learning_rate")[-1] == (4, 0.00005)
    names = latest(metrics(api, runner.job))
    assert names["loss"] == (4, 1.9) and names["eval_loss"] == (4, 2.2)
    assert set(names) == {
        "loss",
        "grad_norm",
        "learning_rate",
        "epoch",
        "eval_loss",
        "eval_runtime",
        "eval_samples_per_second",
        "train_runtime",
        "train_samples_per_second",
        "train_loss",
    }


def test_points_page_by_step_then_id_with_a_stable_total(api, org):
    runner = first_runner(org)
    runner.send('{"step": 2, "loss": 2.0, "tokens": 20}', '{"step": 1, "loss": 1.0, "tokens": 10}')
    runner.send('{"step": 3, "loss": 3.0}', '{"step": 2, "eval_loss": 2.5}')

    seen, cursor = [], None
    while True:
        body = metrics(api, runner.job, limit=2, **({"cursor": cursor} if cursor else {}))
        assert body["total"] == 6
        assert len(body["data"]) <= 2
        seen += [(point["step"], point["name"], point["value"]) for point in body["data"]]
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert seen == [
        (1, "loss", 1.0),
        (1, "tokens", 10.0),
        (2, "loss", 2.0),
        (2, "tokens", 20.0),
        (2, "eval_loss", 2.5),
        (3, "loss", 3.0),
    ]
    point = metrics(api, runner.job, limit=1)["data"][0]
    assert set(point) == {"name", "step", "value", "time", "attempt"}
    assert point["attempt"] == 1 and datetime.fromisoformat(point["time"]).tzinfo is not None

    newest = metrics(api, runner.job, order="desc", limit=4)
    assert [(p["step"], p["name"]) for p in newest["data"]] == [
        (3, "loss"),
        (2, "eval_loss"),
        (2, "tokens"),
        (2, "loss"),
    ]
    rest = metrics(api, runner.job, order="desc", cursor=newest["next_cursor"])
    assert [(p["step"], p["name"]) for p in rest["data"]] == [(1, "tokens"), (1, "loss")]


def test_since_step_and_name_filter_the_points_and_their_total(api, org):
    runner = first_runner(org)
    runner.send(*(f'{{"step": {step}, "loss": {step}.5, "lr": 0.1}}' for step in range(10)))

    body = metrics(api, runner.job, name="loss", since_step=7)
    assert [(p["step"], p["value"]) for p in body["data"]] == [(7, 7.5), (8, 8.5), (9, 9.5)]
    assert body["total"] == 3
    assert metrics(api, runner.job, since_step=8)["total"] == 4  # loss and learning_rate
    assert metrics(api, runner.job, name="loss")["total"] == 10
    assert metrics(api, runner.job, since_step=0)["total"] == 20
    assert metrics(api, runner.job, name="", since_step="")["total"] == 20  # empty: no filter
    far = metrics(api, runner.job, since_step="9" * 40)
    assert (far["data"], far["total"], far["next_cursor"]) == ([], 0, None)


def test_an_unknown_name_is_an_empty_page_that_still_lists_the_series(api, org):
    runner = first_runner(org)
    runner.send("{'loss': 1.0}")
    for name in ("val_loss", "lo\x00ss", "x" * 1000):
        body = metrics(api, runner.job, name=name)
        assert (body["data"], body["next_cursor"], body["total"]) == ([], None, 0)
        assert [item["name"] for item in body["names"]] == ["loss"]


def test_a_job_without_metrics_has_none(api, org):
    job = make_job(org)
    assert metrics(api, job) == {"names": [], "data": [], "next_cursor": None, "total": 0}
    assert api.get(f"/api/v1/compute/jobs/{job.public_id}").json()["latest_metrics"] == {}


@pytest.mark.parametrize("since_step", ["-1", "abc", "1.5", " 3", "+3", "1e3", "٣"])
def test_a_since_step_that_is_not_a_whole_number_is_400_naming_it(api, org, since_step):
    job = make_job(org)
    response = api.get(f"/api/v1/compute/jobs/{job.public_id}/metrics", {"since_step": since_step})
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request"
    assert response.json()["error"]["param"] == "since_step"


@pytest.mark.parametrize(
    ("params", "param"),
    [
        ({"limit": "0"}, "limit"),
        ({"limit": "501"}, "limit"),
        ({"order": "sideways"}, "order"),
        ({"cursor": "not-a-cursor!"}, "cursor"),
        ({"cursor": encode_cursor([1])}, "cursor"),  # one key, not (step, id)
        ({"cursor": encode_cursor(["a", 1])}, "cursor"),
        ({"cursor": encode_cursor([-1, 1])}, "cursor"),
        ({"cursor": encode_cursor([2**31, 1])}, "cursor"),  # past the largest step
        ({"cursor": encode_cursor([1, True])}, "cursor"),
        ({"cursor": base64.urlsafe_b64encode(b"[1,1e400]").decode()}, "cursor"),
    ],
)
def test_bad_paging_parameters_are_400_naming_them(api, org, params, param):
    runner = first_runner(org)
    runner.send("{'loss': 1.0}")
    response = api.get(f"/api/v1/compute/jobs/{runner.job.public_id}/metrics", params)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == param


def test_another_orgs_job_is_404(api, other_org):
    theirs = first_runner(other_org)
    theirs.send("{'loss': 1.0}")
    response = api.get(f"/api/v1/compute/jobs/{theirs.job.public_id}/metrics")
    assert response.status_code == 404
    assert response.json()["error"]["type"] == "not_found"
    assert api.get("/api/v1/compute/jobs/job_nope/metrics").status_code == 404


def test_a_nan_loss_is_a_null_value_and_still_a_point(api, org):
    runner = first_runner(org)
    runner.send("{'loss': 2.0}", "{'loss': nan}")
    assert series(api, runner.job, "loss") == [(1, 2.0), (2, None)]
    body = api.get(f"/api/v1/compute/jobs/{runner.job.public_id}").json()
    assert body["latest_metrics"] == {"loss": None}


def test_a_resume_leaves_out_the_points_it_trains_again(api, org, slots):
    slots(1)
    job = submit(org, slots)
    first = Runner(job, running(job))
    first.send(*NANOGPT)
    first.send("step 30: train loss 2.3000, val loss 2.4000")  # evaluated, never checkpointed
    Attempt.objects.filter(job=job, number=1).update(reclaim_reason="reclaimed")
    reports.runner_exited(Attempt.objects.get(job=job, number=1).pk, 143)
    second = dispatch.allocate(job.pk)
    services.job_transition(job_id=job.pk, to=JobState.PROVISIONING)
    reports.runner_started(second.pk, resumed_from_step=20)

    # Before attempt 2 reports anything, step 30 is already gone.
    assert series(api, job, "val_loss") == [(0, 4.2), (20, 2.64)]
    assert latest(metrics(api, job))["val_loss"] == (20, 2.64)

    # nanoGPT evaluates again at the step it resumed from, then trains on.
    Runner(job, second).send(
        "step 20: train loss 2.6200, val loss 2.6500",
        "iter 20: loss 2.5800, time 12.00ms, mfu 11.00%",
        "iter 21: loss 2.5000, time 12.00ms, mfu 11.00%",
    )
    assert series(api, job, "val_loss") == [(0, 4.2), (20, 2.65)]
    loss = series(api, job, "loss")
    assert [step for step, _ in loss] == list(range(22))
    assert loss[-2:] == [(20, 2.58), (21, 2.5)]
    body = metrics(api, job, since_step=20)
    assert {(p["name"], p["step"], p["attempt"]) for p in body["data"]} >= {
        ("val_loss", 20, 2),
        ("loss", 20, 2),
    }
    assert all(p["attempt"] == 2 for p in body["data"])
    whole = metrics(api, job)
    assert whole["total"] == sum(len(series(api, job, item["name"])) for item in whole["names"])
    assert api.get(f"/api/v1/compute/jobs/{job.public_id}").json()["latest_metrics"] == {
        "loss": 2.5,
        "mfu_pct": 11.0,
        "time_ms": 12.0,
        "train_loss": 2.62,
        "val_loss": 2.65,
    }


def test_the_job_list_reads_latest_metrics_without_a_query_per_job(api, org, slots):
    def list_queries() -> tuple[int, list[dict]]:
        with CaptureQueriesContext(connection) as queries:
            response = api.get("/api/v1/compute/jobs", {"limit": 50})
        assert response.status_code == 200
        return len(queries), response.json()["data"]

    def started() -> Runner:
        job = submit(org, slots)
        return Runner(job, running(job))

    slots(5)
    started().send("{'loss': 1.0, 'learning_rate': 0.001}")
    list_queries()  # the key's use is recorded at most once an interval: not per request
    one, _ = list_queries()
    for index in range(4):
        started().send(f"{{'loss': {index}.5}}")
    five, data = list_queries()
    assert five == one
    assert len(data) == 5
    assert data[-1]["latest_metrics"] == {"learning_rate": 0.001, "loss": 1.0}
    assert data[0]["latest_metrics"] == {"loss": 3.5}
    assert all(not math.isnan(value) for item in data for value in item["latest_metrics"].values())
