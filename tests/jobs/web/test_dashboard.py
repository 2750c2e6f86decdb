"""The overview (the organization's home) and the all-jobs list, through the test client."""

from __future__ import annotations

import re
import uuid

import pytest

from apps.jobs import services
from apps.jobs.models import Job
from apps.jobs.states import JobState as S
from tests.factories import ProjectFactory
from tests.jobs.helpers import PATH_TO, job_body

pytestmark = pytest.mark.django_db


def _job(org, *, name="train", project=None, state=S.REQUESTED, by=None, kind=None, **extra):
    body = job_body(name=name, **extra)
    if project is not None:
        body["project"] = project.public_id
    job = services.job_create(
        organization=org, payload=body, idempotency_key=uuid.uuid4().hex, created_by=by
    ).job
    if kind:
        Job.objects.filter(pk=job.pk).update(kind=kind)
    for step in PATH_TO[state]:
        reason = "exit_code_1" if step == S.FAILED else None
        services.job_transition(job_id=job.pk, to=step, reason=reason)
    return Job.objects.get(pk=job.pk)


def _section(body: str, section_id: str) -> str:
    return body.split(f'id="{section_id}"')[1].split("</section>")[0]


def _rows(body: str) -> list[str]:
    return re.findall(r'id="job-row-(job_[A-Za-z0-9]+)"', body)


def test_home_opens_the_overview_of_the_users_organization(client_for, member, org):
    response = client_for(member).get("/")
    assert response.status_code == 302 and response["Location"] == "/o/acme/"


def test_the_overview_shows_running_waiting_and_failed_jobs_with_reasons(
    client_for, member, org, other_org, project
):
    running = _job(org, name="big-run", project=project, state=S.RUNNING)
    waiting = _job(org, name="queued-one", project=project)
    services.record_event(
        job=waiting, attempt=None, type="waiting_for_capacity", message="Waiting for capacity."
    )
    resuming = _job(org, name="spot-run", project=project, state=S.PREEMPTED)
    failed = _job(org, name="broken", project=project, state=S.FAILED)
    theirs = _job(other_org, name="not-yours", state=S.RUNNING)

    body = client_for(member).get("/o/acme/").content.decode()

    running_part = _section(body, "overview-running")
    assert running.public_id in running_part and "big-run" in running_part
    queued_part = _section(body, "overview-queued")
    assert "No capacity: no provider has cpu x1 free." in queued_part
    assert "Waiting to resume from its last checkpoint." in queued_part
    assert waiting.public_id in queued_part and resuming.public_id in queued_part
    failures_part = _section(body, "overview-failures")
    assert failed.public_id in failures_part
    assert "The workload exited with code 1." in failures_part
    assert 'title="exit_code_1"' in failures_part  # the code stays on hover
    assert 'data-overview="running-count">1<' in body
    assert theirs.public_id not in body and "not-yours" not in body
    assert 'data-overview="spend-today">$0.00<' in body


def test_the_overview_says_what_to_do_when_there_is_nothing_yet(client_for, member, viewer, org):
    body = client_for(member).get("/o/acme/").content.decode()
    assert "No projects yet" in body and 'href="/o/acme/projects/new/"' in body
    assert "Ask an admin" in client_for(viewer).get("/o/acme/").content.decode()
    ProjectFactory(organization=org, name="Vision", slug="vision")
    body = client_for(member).get("/o/acme/").content.decode()
    assert "No jobs yet" in body and 'href="/o/acme/projects/vision/jobs/new/"' in body


def test_another_organizations_overview_and_list_are_404(client_for, member, other_org):
    client = client_for(member)
    assert client.get("/o/globex/").status_code == 404
    assert client.get("/o/globex/jobs/").status_code == 404


def test_the_all_jobs_list_filters_by_project_state_kind_creator_and_name(
    client_for, member, viewer, org, project
):
    other = ProjectFactory(organization=org, name="Audio", slug="audio")
    mine = _job(org, name="resnet-sweep", project=project, by=member)
    theirs = _job(org, name="whisper-tune", project=other, by=viewer, kind="finetune")
    failed = _job(org, name="resnet-broken", project=project, state=S.FAILED, by=viewer)
    client = client_for(member)

    def listed(query: str) -> set[str]:
        response = client.get(f"/o/acme/jobs/?{query}")
        assert response.status_code == 200
        return set(_rows(response.content.decode()))

    assert listed("") == {mine.public_id, theirs.public_id, failed.public_id}
    assert listed("project=vision") == {mine.public_id, failed.public_id}
    assert listed("state=failed") == {failed.public_id}
    assert listed("kind=finetune") == {theirs.public_id}
    assert listed(f"creator={viewer.username}") == {theirs.public_id, failed.public_id}
    assert listed("q=RESNET") == {mine.public_id, failed.public_id}
    assert listed(f"q={theirs.public_id}") == {theirs.public_id}
    assert listed("project=vision&q=sweep") == {mine.public_id}
    assert listed("state=bogus&kind=bogus") == listed("")  # ignored, never a 500

    body = client.get("/o/acme/jobs/?project=vision&state=failed").content.decode()
    assert '<option value="vision" selected>' in body  # the form shows the URL's filters
    assert '<option value="failed" selected>' in body
    assert "1 job" in body  # the counters' total
    assert client.get("/o/acme/jobs/?project=nope").status_code == 404
    unknown = client.get("/o/acme/jobs/?creator=nobody").content.decode()
    assert "No such member." in unknown and _rows(unknown) == []


def test_the_all_jobs_list_pages_by_cursor_and_keeps_its_filters(client_for, member, org, project):
    made = [_job(org, name=f"run-{n}", project=project) for n in range(27)]
    _job(org, name="elsewhere")
    client = client_for(member)
    first = client.get("/o/acme/jobs/?project=vision").content.decode()
    assert _rows(first) == [job.public_id for job in reversed(made)][:25]
    older = re.search(r'class="older" href="([^"]+)"', first).group(1).replace("&amp;", "&")
    assert "project=vision" in older and "cursor=" in older
    second = client.get(f"/o/acme/jobs/{older}").content.decode()
    assert _rows(second) == [made[1].public_id, made[0].public_id]
    stale = client.get("/o/acme/jobs/?project=vision&cursor=not-a-cursor")
    assert stale.status_code == 200 and len(_rows(stale.content.decode())) == 25


def test_a_waiting_jobs_page_says_why_it_waits(client_for, member, org, project):
    job = _job(org, name="patient", project=project)
    client = client_for(member)
    status = _status(client.get(f"/o/acme/jobs/{job.public_id}/").content.decode())
    assert "Being placed on a provider." in status
    services.record_event(
        job=job, attempt=None, type="waiting_for_capacity", message="Waiting for capacity."
    )
    status = _status(client.get(f"/o/acme/jobs/{job.public_id}/").content.decode())
    assert "No capacity: no provider has cpu x1 free." in status  # the overview's words


def test_a_failed_jobs_banner_gives_the_reason_in_words_and_what_to_do(
    client_for, member, org, project
):
    job = _job(org, name="oops", project=project, state=S.FAILED)
    body = client_for(member).get(f"/o/acme/jobs/{job.public_id}/").content.decode()
    banner = body.split('id="job-error"')[1].split("</div>\n</div>")[0]
    assert "The job failed. The workload exited with code 1." in banner
    assert "<code>exit_code_1</code>" in banner  # the code, for a search or a ticket
    assert "The last lines of its log below usually say why." in banner


def test_the_job_page_writes_times_for_the_browser_with_utc_on_hover(
    client_for, member, org, project
):
    job = _job(org, name="timed", project=project, state=S.SUCCEEDED)
    body = client_for(member).get(f"/o/acme/jobs/{job.public_id}/").content.decode()
    facts = body.split('id="job-facts"')[1].split("</dl>")[0]
    started = job.started_at or job.created_at
    assert re.search(
        r'<time datetime="\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ" data-style="datetime"', facts
    )
    assert 'title="' in facts and ' UTC"' in facts
    assert started.strftime("%Y-%m-%d") in facts


def _status(body: str) -> str:
    return body.split('id="job-status"')[1].split("</div>")[0]
