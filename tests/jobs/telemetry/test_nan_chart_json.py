"""A NaN or infinite loss reaches the job page as strict JSON (null: a gap in the chart) in
both the first render and the live feed, and as text in the metrics table."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime

import pytest
from django.test import Client

from apps.jobs import services
from apps.jobs.execution import dispatch
from apps.jobs.execution.tokens import token_for
from apps.jobs.live import partials
from apps.jobs.models import Job, MetricPoint
from apps.jobs.states import JobState
from tests.jobs.helpers import make_job

pytestmark = pytest.mark.django_db

LINES = [
    '{"step": 1, "loss": 2.0}',
    '{"step": 2, "loss": NaN}',
    "{'loss': inf, 'epoch': 0.5}",
    '{"step": 4, "loss": -Infinity}',
    '{"step": 5, "loss": 1.0}',
]
PLOTTED = [(1, 2.0), (2, None), (3, None), (4, None), (5, 1.0)]


def _strict(text: str):
    """json.loads that refuses NaN and Infinity, as the browser's JSON.parse does."""

    def refuse(constant: str):
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture
def job(org) -> Job:
    job = make_job(org)
    attempt = dispatch.allocate(job.pk)
    services.job_transition(job_id=job.pk, to=JobState.PROVISIONING)
    now = datetime.now(UTC).isoformat()
    lines = [{"seq": i, "ts": now, "message": m} for i, m in enumerate(LINES, start=1)]
    response = Client(HTTP_AUTHORIZATION=f"Bearer {token_for(attempt.token_nonce)}").post(
        f"/api/v1/runner/jobs/{job.public_id}/logs", {"lines": lines}, "application/json"
    )
    assert response.status_code == 200
    return Job.objects.get(pk=job.pk)


def test_the_pages_chart_json_is_strict_with_null_for_non_finite_losses(client_for, member, job):
    body = client_for(member).get(f"/o/acme/jobs/{job.public_id}/").content.decode()
    raw = re.search(r'<script id="chart-initial" type="application/json">(.*?)</script>', body)
    points = _strict(raw.group(1))
    assert [(step, loss) for _, step, loss in points] == PLOTTED
    # The table shows the value itself.
    cells = re.findall(r'<span role="cell">([^<]*)</span>\s*<span role="cell">step</span>', body)
    assert cells == ["2", "NaN", "∞", "-∞", "1"]  # 4 significant digits, no padding


def test_the_live_feed_json_is_strict_with_null_for_non_finite_losses(job):
    ids = list(MetricPoint.objects.filter(job=job).order_by("id").values_list("id", flat=True))
    html = partials.render_push(
        partials.job_for_push(job.pk),
        seq=job.live_seq + 1,
        event_ids=[],
        log_ids=[],
        metric_ids=ids,
        state_changed=False,
    )
    raw = re.search(r'<template class="chart-points">(.*?)</template>', html)
    points = _strict(raw.group(1))
    assert [(step, loss) for _, step, loss in points] == PLOTTED
    assert 'data-metric="loss">1<' in html


def test_the_latest_metric_card_shows_a_nan_loss_as_text(client_for, member, org):
    job = make_job(org)
    attempt = dispatch.allocate(job.pk)
    MetricPoint.objects.create(job=job, attempt=attempt.number, step=1, loss=float("nan"))
    body = client_for(member).get(f"/o/acme/jobs/{job.public_id}/").content.decode()
    assert 'data-metric="loss">NaN<' in body
    raw = re.search(r'<script id="chart-initial" type="application/json">(.*?)</script>', body)
    assert [loss for _, _, loss in _strict(raw.group(1))] == [None]
