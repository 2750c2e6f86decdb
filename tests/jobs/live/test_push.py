"""Writes push rendered partials to the job's and the project's channel groups (real Redis
channel layer), numbered by the job's live sequence, and only after the transaction commits."""

import asyncio
import re
from datetime import UTC, datetime

import pytest
import redis
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings

from apps.jobs import services
from apps.jobs.execution import dispatch
from apps.jobs.live import push
from apps.jobs.models import Job, MetricPoint
from apps.jobs.states import JobState
from apps.jobs.telemetry import ingestion
from tests.jobs.helpers import make_job

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _no_stale_watchers():
    yield
    client = redis.Redis.from_url(settings.REDIS_URL)
    for key in client.scan_iter("trainyard:watchers:*"):
        client.delete(key)


def _listen(group: str, *, watch: bool = True) -> str:
    """Join a group as a consumer does (counting itself a watcher unless told not to)."""
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(group, channel)
    if watch:
        redis.Redis.from_url(settings.REDIS_URL).incr(push.watch_key(group))
    return channel


def _receive(channel: str, timeout: float = 5) -> dict:
    async def receive():
        return await asyncio.wait_for(get_channel_layer().receive(channel), timeout=timeout)

    return async_to_sync(receive)()


def _seq(html: str) -> int:
    return int(re.search(r'id="job-live" data-seq="(\d+)"', html).group(1))


def test_a_transition_pushes_status_and_event_after_commit(org, django_capture_on_commit_callbacks):
    job = make_job(org)
    job_channel = _listen(push.job_group(job.public_id))
    project_channel = _listen(push.project_group(job.project.public_id))
    before = Job.objects.get(pk=job.pk).live_seq

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        services.job_transition(job_id=job.pk, to=JobState.ALLOCATING)
    assert len(callbacks) == 1  # queued for commit, not sent inside the transaction
    callbacks[0]()

    pushed = _receive(job_channel)
    assert pushed["type"] == "job.push"
    assert pushed["seq"] == _seq(pushed["html"]) == before + 1
    assert 'id="job-status"' in pushed["html"] and 'data-state="allocating"' in pushed["html"]
    event = job.events.latest("id")
    assert f'id="evt-{event.id}"' in pushed["html"]
    row = _receive(project_channel)
    assert row["type"] == "project.push"
    assert f'id="job-row-{job.public_id}"' in row["html"]


def test_log_batches_push_their_lines_and_metrics(org, django_capture_on_commit_callbacks):
    job = make_job(org)
    attempt = dispatch.allocate(job.pk)
    channel = _listen(push.job_group(job.public_id))
    now = datetime.now(UTC)
    lines = [
        ingestion.IncomingLine(1, now, "user", "stdout", "hello <b>world</b>"),
        ingestion.IncomingLine(2, now, "user", "stdout", '{"step": 1, "loss": 0.5}'),
    ]
    with django_capture_on_commit_callbacks(execute=True):
        ingestion.ingest(attempt=attempt, job=Job.objects.get(pk=job.pk), lines=lines)
    html = ""
    while "hello" not in html:
        html = _receive(channel)["html"]
    assert "hello &lt;b&gt;world&lt;/b&gt;" in html  # escaped by the template
    assert 'hx-swap-oob="beforeend:#log-lines"' in html
    assert 'data-metric="loss">0.5<' in html  # 4 significant digits, no padding
    point = MetricPoint.objects.get(job=job)
    assert f'class="chart-points">[[{point.id}, 1, 0.5]]' in html
    assert _seq(html) == Job.objects.get(pk=job.pk).live_seq


def test_nothing_is_rendered_or_sent_when_no_page_watches(org, django_capture_on_commit_callbacks):
    job = make_job(org)
    channel = _listen(push.job_group(job.public_id), watch=False)
    with django_capture_on_commit_callbacks(execute=True):
        services.job_transition(job_id=job.pk, to=JobState.ALLOCATING)
    with pytest.raises(TimeoutError):
        _receive(channel, timeout=0.5)
    assert Job.objects.get(pk=job.pk).live_seq == 2  # the sequence still counts the write


def test_a_state_change_reaches_only_the_groups_watched(org, django_capture_on_commit_callbacks):
    """The four groups a state change may go to are looked up at once: each still gets the
    push only when a page watches it."""
    job = make_job(org)
    job_channel = _listen(push.job_group(job.public_id), watch=False)
    project_channel = _listen(push.project_group(job.project.public_id))
    with django_capture_on_commit_callbacks(execute=True):
        services.job_transition(job_id=job.pk, to=JobState.ALLOCATING)
    assert f'id="job-row-{job.public_id}"' in _receive(project_channel)["html"]
    with pytest.raises(TimeoutError):
        _receive(job_channel, timeout=0.5)


def test_a_bundle_pushes_lines_only_to_the_jobs_whose_pages_watch(
    org, django_capture_on_commit_callbacks
):
    """A relay's bundle asks Redis once which of its jobs are watched: the watched job's
    page gets its lines, the other's group nothing."""
    from apps.jobs.models import Attempt

    watched_job, unwatched_job = make_job(org), make_job(org)
    attempts = [
        Attempt.objects.select_related("job__project").get(pk=dispatch.allocate(job.pk).pk)
        for job in (watched_job, unwatched_job)
    ]
    seen = _listen(push.job_group(watched_job.public_id))
    unseen = _listen(push.job_group(unwatched_job.public_id), watch=False)
    now = datetime.now(UTC)
    batches = [
        ingestion.Batch(attempt, [ingestion.IncomingLine(1, now, "user", "stdout", f"hi {n}")])
        for n, attempt in enumerate(attempts)
    ]
    with django_capture_on_commit_callbacks(execute=True):
        results = ingestion.ingest_many(batches)
    assert [result.accepted for result in results] == [1, 1]
    html = ""
    while "hi 0" not in html:
        html = _receive(seen)["html"]
    assert _seq(html) == Job.objects.get(pk=watched_job.pk).live_seq
    with pytest.raises(TimeoutError):
        _receive(unseen, timeout=0.5)


@pytest.mark.parametrize(
    ("kind", "offered"), [(Job.Kind.FINETUNE, True), (Job.Kind.CONTAINER, False)]
)
def test_the_push_of_a_succeeded_finetune_brings_its_open_in_playground_button(
    org, django_capture_on_commit_callbacks, kind, offered
):
    """What a reload of a succeeded fine-tune shows beside its name arrives live with the
    state change, and a container job's page is offered no Playground."""
    job = make_job(org)
    Job.objects.filter(pk=job.pk).update(kind=kind, state=JobState.FINALIZING)
    channel = _listen(push.job_group(job.public_id))

    with django_capture_on_commit_callbacks(execute=True):
        services.job_transition(job_id=job.pk, to=JobState.SUCCEEDED, exit_code=0)

    html = _receive(channel)["html"]
    actions = re.search(r'<span id="job-page-actions"[^>]*>(.*?)</span>', html, re.S)
    assert actions is not None and 'hx-swap-oob="true"' in actions.group(0)
    link = f'?job={job.public_id}">Open in Playground</a>'
    assert (link in actions.group(1)) is offered
