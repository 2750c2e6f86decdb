"""The domain starts tasks by their registered names (`apps.jobs.enqueue`, and each app's own
`enqueue` module): a renamed or missing task must fail here, not in production with a message
nobody consumes."""

import importlib
import json
from pathlib import Path

import pytest
import redis
from django.db import transaction

import apps
from apps.jobs import enqueue
from config.celery import app


def _enqueue_modules() -> list:
    """Every app's `enqueue` module: where the domain names the tasks it sends."""
    apps_dir = Path(apps.__file__).parent
    names = sorted(path.parent.name for path in apps_dir.glob("*/enqueue.py"))
    return [importlib.import_module(f"apps.{name}.enqueue") for name in names]


def test_every_name_any_app_sends_is_a_registered_task():
    app.loader.import_default_modules()  # what a worker does at start: autodiscovery
    modules = _enqueue_modules()

    missing = [
        (module.__name__, name)
        for module in modules
        for name in module.TASK_NAMES
        if name not in app.tasks
    ]

    assert {module.__name__ for module in modules} >= {"apps.jobs.enqueue", "apps.serving.enqueue"}
    assert missing == []


def test_no_app_sends_a_task_by_a_name_spelled_outside_its_enqueue_module():
    """`send_task("...")` anywhere else would bypass the registration check above."""
    apps_dir = Path(apps.__file__).parent
    senders = sorted(
        str(path.relative_to(apps_dir.parent))
        for path in apps_dir.rglob("*.py")
        if "send_task(" in path.read_text() and path.name != "enqueue.py"
    )

    assert senders == []


def test_the_tasks_are_registered_under_exactly_those_names():
    app.loader.import_default_modules()

    registered = {name for name in app.tasks if name.startswith("jobs.")}

    assert set(enqueue.TASK_NAMES) <= registered
    assert "jobs.reconcile" in registered


def _queued(client: redis.Redis, job_id: int) -> list[str]:
    """The task names of the messages in the broker's default queue for `job_id`."""
    names = []
    for raw in client.lrange("celery", 0, -1):
        headers = json.loads(raw)["headers"]
        if headers.get("argsrepr") == f"[{job_id}]":
            names.append(headers["task"])
            client.lrem("celery", 0, raw)
    return names


@pytest.fixture
def queue_left_alone():
    """No Celery worker takes messages off the default queue while the test reads it: a live
    stack this test worker started for an earlier test (its Redis database is this worker's)
    stops consuming it, and only a worker that was consuming it before consumes it again
    after (a stack paused between tests stays paused: resumed, it would take the next
    test's tasks while the database is flushed, a deadlock). With no stack up, nobody
    answers."""
    queues = app.control.inspect(timeout=1).active_queues() or {}
    consuming = [
        name
        for name, listed in queues.items()
        if any(queue.get("name") == "celery" for queue in listed)
    ]
    if consuming:
        app.control.cancel_consumer("celery", destination=consuming, reply=True, timeout=5)
    yield
    if consuming:
        app.control.add_consumer("celery", destination=consuming, reply=True, timeout=5)


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_a_send_reaches_the_broker_after_commit_and_never_after_a_rollback(
    settings, queue_left_alone
):
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    job_id = 987_654_321  # no worker takes it: the message stays in the queue to be read

    with transaction.atomic():
        enqueue.dispatch_on_commit(job_id)
        assert _queued(client, job_id) == []
    assert _queued(client, job_id) == ["jobs.dispatch_job"]

    with pytest.raises(RuntimeError), transaction.atomic():
        enqueue.finalize_on_commit(job_id)
        raise RuntimeError("rolled back")
    assert _queued(client, job_id) == []
