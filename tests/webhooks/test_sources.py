"""Where events come from besides jobs: billing's budget pass when a threshold is crossed,
serving's sync when a revision goes live or fails, and a serve job that ends without being
stopped. Each is told once per webhook, however often its source runs."""

from __future__ import annotations

import pytest

from apps.billing import budgets
from apps.billing.models import Budget
from apps.jobs import services as job_services
from apps.jobs import tasks as job_tasks
from apps.jobs.models import Artifact
from apps.jobs.states import JobState
from apps.serving import services as serving_services
from apps.serving.models import EndpointRevision
from apps.webhooks import services
from apps.webhooks.events import EventType
from apps.webhooks.models import Delivery
from tests.billing.api_helpers import spend
from tests.serving.test_endpoint_pages import served_endpoint

pytestmark = pytest.mark.django_db

URL = "http://93.184.216.34/hook"


def _told(event_type: str) -> list[dict]:
    return [d.payload for d in Delivery.objects.filter(event_type=event_type).order_by("id")]


def test_a_budget_threshold_is_told_once_per_notice(org, django_capture_on_commit_callbacks):
    services.webhook_create(organization=org, url=URL, events=[EventType.BUDGET_THRESHOLD])
    Budget.objects.create(
        public_id="bud_team", organization=org, name="team", limit_micros=100, thresholds=[50, 80]
    )
    spend(org, 60)

    with django_capture_on_commit_callbacks(execute=True):
        budgets.evaluate()
        budgets.evaluate()

    (told,) = _told(EventType.BUDGET_THRESHOLD)
    assert told["data"]["threshold"] == 50
    assert told["data"]["budget"]["id"] == "bud_team"
    assert (told["data"]["spent_micros"], told["data"]["limit_micros"]) == (60, 100)


def test_a_revision_going_live_or_failing_is_told(project, django_capture_on_commit_callbacks):
    served = served_endpoint(project)
    services.webhook_create(
        organization=project.organization,
        url=URL,
        events=[EventType.ENDPOINT_READY, EventType.ENDPOINT_FAILED],
    )
    adapter = served.finetune.artifacts.get(kind=Artifact.Kind.ADAPTER)
    r3, r4 = (
        EndpointRevision.objects.create(
            endpoint=served.endpoint, number=n, artifact=adapter, served_name=f"support-bot-r{n}"
        )
        for n in (3, 4)
    )

    # The sync's last steps (it needs a running engine before them): r3 is loaded,
    # smoke-tested and made current; r4 fails to load.
    with django_capture_on_commit_callbacks(execute=True):
        serving_services._promote(served.endpoint, r3)
        serving_services._fail(r4, "The engine refused it: not an adapter")

    (ready,) = _told(EventType.ENDPOINT_READY)
    (failed,) = _told(EventType.ENDPOINT_FAILED)
    assert ready["data"]["revision"] == {"number": 3, "served_name": "support-bot-r3"}
    assert ready["data"]["endpoint"]["id"] == served.endpoint.public_id
    assert failed["data"]["revision"]["number"] == 4
    assert failed["data"]["message"] == "The engine refused it: not an adapter"


def test_a_serve_job_that_fails_fails_its_endpoint(project):
    served = served_endpoint(project)
    services.webhook_create(
        organization=project.organization,
        url=URL,
        events=[EventType.ENDPOINT_FAILED, EventType.JOB_FAILED],
    )
    job_services.job_transition(job_id=served.endpoint.job_id, to=JobState.FINALIZING)
    job_services.job_transition(job_id=served.endpoint.job_id, to=JobState.FAILED)

    job_tasks.job_outcome(served.endpoint.job_id, JobState.FAILED)
    job_tasks.job_outcome(served.endpoint.job_id, JobState.FAILED)

    (failed,) = _told(EventType.ENDPOINT_FAILED)
    assert failed["data"]["endpoint"]["id"] == served.endpoint.public_id
    assert failed["data"]["message"].startswith("Its serve job failed")
    assert [p["data"]["job"]["kind"] for p in _told(EventType.JOB_FAILED)] == ["serve"]
