"""Metric lines become named series at ingestion: one point per series and step, the job
page's chart keeps the training loss only, and what cannot be kept is said. Posted through
the real runner endpoint, on real PostgreSQL."""

from __future__ import annotations

import pytest

from apps.jobs.live import partials
from apps.jobs.models import Job, MetricSample
from apps.jobs.selectors import metric_series
from apps.jobs.telemetry import series
from tests.jobs.telemetry.test_ingestion_robustness import Runner

pytestmark = pytest.mark.django_db


@pytest.fixture
def runner(org) -> Runner:
    return Runner(org)


def live(job: Job, name: str) -> list[tuple[int, float]]:
    return list(
        MetricSample.objects.filter(job=job, name=name, superseded=False)
        .order_by("step", "id")
        .values_list("step", "value")
    )


def summary(job: Job) -> dict:
    return Job.objects.get(pk=job.pk).metric_series


def test_the_chart_plots_nanogpt_training_loss_only_one_point_per_step(runner):
    runner.send(
        "iter 19: loss 2.7000, time 10.00ms",
        "step 20: train loss 2.6100, val loss 2.6400",
        "iter 20: loss 2.6000, time 10.00ms",
    )
    chart = partials.initial_chart(runner.job)
    assert [(step, loss) for _, step, loss in chart] == [(19, 2.7), (20, 2.6)]
    assert live(runner.job, "val_loss") == [(20, 2.64)]


def test_a_series_reported_twice_at_a_step_keeps_the_later_point(runner):
    runner.send('{"step": 5, "loss": 1.0}', '{"step": 5, "loss": 0.9}')  # in one batch
    runner.send('{"step": 5, "loss": 0.8, "tokens": 3}')  # and in the next
    assert live(runner.job, "loss") == [(5, 0.8)]
    assert MetricSample.objects.filter(job=runner.job, name="loss").count() == 2  # one replaced
    assert summary(runner.job)["loss"]["points"] == 1
    assert summary(runner.job) == metric_series(runner.job)


def test_the_summary_matches_the_samples_after_many_batches(runner):
    runner.send(*(f"{{'loss': {i}.0, 'learning_rate': 0.1}}" for i in range(5)))
    runner.send("{'eval_loss': 3.0, 'epoch': 1.0}", '{"step": 2, "loss": 7.0}')
    runner.send("{'loss': 1.0}")
    assert summary(runner.job) == metric_series(runner.job)
    assert summary(runner.job)["loss"]["step"] == 6
    assert summary(runner.job)["eval_loss"] == {
        **summary(runner.job)["eval_loss"],
        "step": 5,
        "value": 3.0,
        "points": 1,
    }


def test_names_past_the_series_cap_or_too_long_are_dropped_and_said(runner, monkeypatch):
    monkeypatch.setattr(series, "MAX_SERIES", 3)
    long_name = "k" * (series.MAX_NAME_CHARS + 1)
    runner.send(f'{{"step": 1, "loss": 1, "a": 2, "{long_name}": 3, "b": 4, "c": 5}}')
    runner.send('{"step": 2, "loss": 1, "a": 2, "d": 6}')
    assert sorted(summary(runner.job)) == ["a", "b", "loss"]
    assert live(runner.job, "a") == [(1, 2.0), (2, 2.0)]
    notes = runner.drop_notes()
    assert len(notes) == 2
    assert "'c'" in notes[0] and "kkk" in notes[0] and "at most 3 series" in notes[0]
    assert "'d'" in notes[1]
    # The lines and the page's metric rows are all kept.
    assert [point[0] for point in runner.points()] == [1, 2]
