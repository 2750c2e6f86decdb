"""An endpoint's page in real Chromium against the live stack: a rollback made elsewhere (here,
by the test process through the service) shows on the open page without a reload: the
current revision, the Rollback button's target, the revisions and the promotions."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection
from django.utils import timezone
from playwright.sync_api import expect

from apps.jobs import outcomes
from apps.jobs.models import Job
from apps.jobs.states import JobState
from apps.serving import payloads, services
from apps.serving.kind import Serve
from apps.serving.models import EndpointRequest
from tests.serving.test_endpoint_pages import served_endpoint

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


def in_own_thread(function, **kwargs):
    """Call a service as a web request would: Playwright's sync API runs an event loop in
    the test's thread, where the push sent after commit (`async_to_sync`) cannot run."""

    def call():
        try:
            return function(**kwargs)
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(call).result()


def test_a_rollback_shows_the_new_current_revision_without_a_reload(signed_in, team, screenshot):
    member = team["member"]
    served = served_endpoint(team["project"], user=member)
    for latency in (80, 120, 400):
        EndpointRequest.objects.create(
            endpoint=served.endpoint,
            organization=team["org"],
            path="/v1/chat/completions",
            status_code=200,
            latency_ms=latency,
            started_at=timezone.now(),
        )
    page = signed_in(member)
    page.goto("/o/studio/endpoints/")
    page.get_by_role("link", name="support-bot").click()
    page.wait_for_url(f"**{served.url}")

    expect(page.locator("#current-revision")).to_have_text("r2")
    expect(page.locator("#endpoint-state")).to_have_text("ready")
    expect(page.locator("#rollback-to")).to_have_text("r1")
    expect(page.locator("#requests-chart .uplot")).to_be_visible()
    expect(page.locator("#latency-chart .uplot")).to_be_visible()
    expect(page.locator("#live-indicator.on")).to_be_visible(timeout=10_000)
    page.evaluate("window.__notReloaded = true")

    in_own_thread(
        services.endpoint_rollback, endpoint=served.endpoint, who=services.Who(user=member)
    )

    expect(page.locator("#current-revision")).to_have_text("r1", timeout=10_000)
    expect(page.locator("#endpoint-status")).to_have_attribute("data-previous", "r2")
    expect(page.locator("#rollback-to")).to_have_text("r2")
    expect(page.locator("#rollback-form")).to_be_visible()
    expect(page.locator("#revision-1")).to_contain_text("current")
    expect(page.locator("#revision-2")).to_contain_text("previous")
    expect(page.locator("#endpoint-promotions tr[data-kind]")).to_have_count(3)
    expect(page.locator("#endpoint-promotions tr[data-kind]").first).to_have_attribute(
        "data-kind", "rollback"
    )
    assert page.evaluate("window.__notReloaded") is True
    screenshot(page, "endpoint-page")


def test_the_status_follows_the_serve_job_without_a_reload(signed_in, team):
    """A preemption (`starting`), the engine of the new attempt listening (the serve job's
    badge), the current revision loaded again there (`ready`) and the serve job failing
    (`failed`) each reach the open page, as a reload would show them."""
    member = team["member"]
    served = served_endpoint(team["project"], user=member)
    revision = served.endpoint.current_revision
    page = signed_in(member)
    page.goto(served.url)
    expect(page.locator("#endpoint-state")).to_have_text("ready")
    expect(page.locator("#live-indicator.on")).to_be_visible(timeout=10_000)
    page.evaluate("window.__notReloaded = true")

    # Preempted and placed again: attempt 2 is being provisioned.
    Job.objects.filter(pk=served.endpoint.job_id).update(
        state=JobState.PROVISIONING, attempt_count=2
    )
    job = Job.objects.get(pk=served.endpoint.job_id)
    in_own_thread(outcomes.notify, job=job, state=JobState.PREEMPTED)
    expect(page.locator("#endpoint-state")).to_have_text("starting", timeout=10_000)
    expect(page.locator("#serve-job-state")).to_have_text("Provisioning")

    # Its engine listens (attempt 2 runs) but has not loaded r2 yet.
    serves_for = payloads.endpoint_for(served.endpoint.public_id)
    Job.objects.filter(pk=job.pk).update(
        state=JobState.RUNNING,
        spec={"container": {"env": {payloads.FOR_ENV: serves_for}}},
    )
    job.refresh_from_db()
    in_own_thread(Serve().service_ready, job=job, attempt=2, port=8000)
    expect(page.locator("#serve-job-state")).to_have_text("Running", timeout=10_000)
    expect(page.locator("#endpoint-state")).to_have_text("starting")

    in_own_thread(services.revision_mark_loaded, revision=revision, attempt=2)
    expect(page.locator("#endpoint-state")).to_have_text("ready", timeout=10_000)

    Job.objects.filter(pk=job.pk).update(state=JobState.FAILED, terminal_at=timezone.now())
    job.refresh_from_db()
    in_own_thread(outcomes.notify, job=job, state=JobState.FAILED)
    expect(page.locator("#endpoint-state")).to_have_text("failed", timeout=10_000)
    expect(page.locator("#endpoint-status")).to_contain_text("The serve job ended")
    assert page.evaluate("window.__notReloaded") is True
