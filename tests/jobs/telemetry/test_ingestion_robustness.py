"""One bad printed line never stops ingestion: metric or event data that PostgreSQL cannot
store is cleaned or dropped (and a system line says so), the log lines always land, and the
next batch's metrics land too. Posted through the real runner endpoint, real PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.test import Client

from apps.core.errors import NotFound
from apps.jobs import services
from apps.jobs.events import JobEventType
from apps.jobs.execution import dispatch
from apps.jobs.execution.tokens import token_for
from apps.jobs.models import Job, JobEvent, LogLine, MetricPoint
from apps.jobs.states import JobState
from apps.jobs.telemetry import ingestion
from apps.jobs.telemetry.metrics import MAX_STEP, ParsedMetric
from tests.jobs.helpers import make_job

pytestmark = pytest.mark.django_db


class Runner:
    def __init__(self, org) -> None:
        job = make_job(org)
        self.attempt = dispatch.allocate(job.pk)
        services.job_transition(job_id=job.pk, to=JobState.PROVISIONING)
        self.job = Job.objects.get(pk=job.pk)
        self.client = Client(HTTP_AUTHORIZATION=f"Bearer {token_for(self.attempt.token_nonce)}")
        self.seq = 0

    def send(self, *messages: str):
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
        return self.client.post(
            f"/api/v1/runner/jobs/{self.job.public_id}/logs",
            {"lines": lines},
            content_type="application/json",
        )

    def user_lines(self) -> list[str]:
        return list(
            LogLine.objects.filter(job=self.job, source="user")
            .order_by("seq")
            .values_list("message", flat=True)
        )

    def system_lines(self) -> list[str]:
        return list(
            LogLine.objects.filter(job=self.job, source="system")
            .order_by("id")
            .values_list("message", flat=True)
        )

    def drop_notes(self) -> list[str]:
        """The system lines that say what a batch dropped."""
        return [m for m in self.system_lines() if m.startswith("Dropped what could not be stored")]

    def points(self) -> list[tuple]:
        return list(
            MetricPoint.objects.filter(job=self.job)
            .order_by("id")
            .values_list("step", "loss", "extra")
        )


@pytest.fixture
def runner(org) -> Runner:
    return Runner(org)


def _accepts_then_keeps_going(runner: Runner, *bad: str) -> None:
    """The bad batch is a 200 with every line stored, and a good batch after it lands."""
    response = runner.send("before", *bad, "after")
    assert response.status_code == 200, response.content
    assert response.json() == {"accepted": len(bad) + 2, "duplicates": 0, "order": "continue"}
    assert runner.user_lines() == ["before", *bad, "after"]
    good = runner.send('{"step": 5, "loss": 0.5}')
    assert good.status_code == 200
    assert runner.points()[-1] == (5, 0.5, {})


def test_a_nul_in_a_metric_key_drops_that_key_and_says_so(runner):
    line = '{"loss": 1, "k\\u0000": 2, "tokens": 3}'
    _accepts_then_keeps_going(runner, line)
    assert runner.points()[0] == (1, 1.0, {"tokens": 3.0})
    dropped = runner.drop_notes()
    assert len(dropped) == 1
    assert "k\\x00" in dropped[0] and "seq 2" in dropped[0]


def test_a_lone_surrogate_in_a_metric_key_drops_that_key(runner):
    _accepts_then_keeps_going(runner, '{"loss": 1, "\\ud800x": 2}')
    assert runner.points()[0] == (1, 1.0, {})
    assert len(runner.drop_notes()) == 1


def test_a_stepless_metric_past_the_largest_step_is_dropped_and_said(runner):
    _accepts_then_keeps_going(
        runner, f'{{"step": {MAX_STEP}, "loss": 3.0}}', '{"loss": 2.0}', "{'loss': 1.0}"
    )
    # The numbered point is kept; the two after it have no step left to take.
    assert runner.points()[0] == (MAX_STEP, 3.0, {})
    assert [p[1] for p in runner.points()] == [3.0, 0.5]
    dropped = runner.drop_notes()
    assert len(dropped) == 1
    assert str(MAX_STEP) in dropped[0] and "2 metric" in dropped[0]


def test_a_stepless_metric_after_a_stored_largest_step_is_dropped(runner):
    assert runner.send(f'{{"step": {MAX_STEP}, "loss": 3.0}}').status_code == 200
    response = runner.send('{"loss": 2.0}')
    assert response.status_code == 200
    assert runner.user_lines()[-1] == '{"loss": 2.0}'
    assert [p[0] for p in runner.points()] == [MAX_STEP]
    assert len(runner.drop_notes()) == 1


def test_a_grading_line_with_a_nested_nan_is_recorded_with_names(runner):
    line = (
        '{"type": "grading", "passed": false, "loss": NaN, '
        '"evals": {"before": Infinity, "after": [1.5, -Infinity, NaN]}, "note": "a\\u0000b"}'
    )
    _accepts_then_keeps_going(runner, line)
    event = JobEvent.objects.get(job=runner.job, type=JobEventType.GRADING)
    assert event.data == {
        "type": "grading",
        "passed": False,
        "loss": "nan",
        "evals": {"before": "inf", "after": [1.5, "-inf", "nan"]},
        "note": "ab",
    }


def test_a_grading_line_nested_too_deep_is_dropped_and_said(runner):
    line = '{"type": "grading", "passed": true, "x": ' + "[" * 5000 + "]" * 5000 + "}"
    _accepts_then_keeps_going(runner, line)
    assert not JobEvent.objects.filter(job=runner.job, type=JobEventType.GRADING).exists()
    dropped = runner.drop_notes()
    assert len(dropped) == 1 and "seq 2" in dropped[0]


def test_a_lone_surrogate_in_a_message_is_stored_replaced(runner):
    response = runner.send("bad \ud800 char")
    assert response.status_code == 200
    assert runner.user_lines() == ["bad \ufffd char"]


def test_whatever_else_the_database_refuses_costs_the_metrics_not_the_lines(runner, monkeypatch):
    # A parser that let an unstorable key through: PostgreSQL refuses the point itself.
    unchecked = ParsedMetric(step=3, loss=1.0, epoch=None, learning_rate=None, extra={"k\0": 1.0})
    monkeypatch.setattr(ingestion, "parse_metric_line", lambda message: unchecked)
    response = runner.send("{'loss': 1.0}", '{"type": "grading", "passed": true}')
    assert response.status_code == 200
    assert response.json() == {"accepted": 2, "duplicates": 0, "order": "continue"}
    assert len(runner.user_lines()) == 2
    assert runner.points() == []
    assert not JobEvent.objects.filter(job=runner.job, type=JobEventType.GRADING).exists()
    (note,) = runner.drop_notes()
    assert "seq 1 to 2" in note and "DataError" in note
    monkeypatch.undo()
    assert runner.send('{"step": 4, "loss": 0.4}').status_code == 200
    assert runner.points() == [(4, 0.4, {})]


def test_a_batch_for_a_job_gone_meanwhile_stores_nothing(runner):
    # The runner was authorised, then the job's row went before its batch was written (a job
    # with a hold in the ledger cannot be deleted; a raw DELETE could). The log table has no
    # foreign-key constraint: ingestion itself refuses lines of a job that is not there.
    gone = Job.objects.get(pk=runner.job.pk)
    gone.pk = Job.objects.order_by("-pk").values_list("pk", flat=True).first() + 1000
    line = ingestion.IncomingLine(1, datetime.now(UTC), "user", "stdout", "orphan?")
    with pytest.raises(NotFound):
        ingestion.ingest(attempt=runner.attempt, job=gone, lines=[line])
    assert not LogLine.objects.filter(job_id=gone.pk).exists()
    assert runner.send("still served").status_code == 200
    assert runner.user_lines() == ["still served"]
