from datetime import timedelta

import pytest
from django.utils import timezone

from apps.jobs import services
from apps.jobs.models import Job, JobEvent, LogLine
from apps.jobs.states import JobState
from tests.factories import ProjectFactory
from tests.jobs.helpers import make_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(api_client_for, org):
    return api_client_for(org)


def test_get_returns_the_job(api, org):
    job = make_job(org)
    response = api.get(f"/api/v1/compute/jobs/{job.public_id}")
    assert response.status_code == 200
    assert response.json()["id"] == job.public_id
    assert response.json()["state"] == "requested"


def test_another_orgs_job_is_404_everywhere(api, other_org):
    theirs = make_job(other_org)
    base = f"/api/v1/compute/jobs/{theirs.public_id}"
    for path in (base, f"{base}/logs", f"{base}/events"):
        response = api.get(path)
        assert response.status_code == 404, path
        assert response.json()["error"]["type"] == "not_found"
    assert api.post(f"{base}/terminate").status_code == 404
    theirs.refresh_from_db()
    assert theirs.state == "requested"


def test_delete_is_405(api, org):
    job = make_job(org)
    response = api.delete(f"/api/v1/compute/jobs/{job.public_id}")
    assert response.status_code == 405
    assert response.json()["error"]["type"] == "method_not_allowed"
    assert Job.objects.filter(pk=job.pk).exists()


def test_the_list_pages_newest_first_with_cursors_and_total(api, org):
    jobs = [make_job(org, name=f"job-{i}") for i in range(5)]
    seen, cursor = [], None
    while True:
        params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        body = api.get("/api/v1/compute/jobs", params).json()
        assert body["total"] == 5
        seen += [item["id"] for item in body["data"]]
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert seen == [job.public_id for job in reversed(jobs)]


def test_jobs_created_in_the_same_instant_are_each_listed_once(api, org):
    jobs = [make_job(org, name=f"job-{i}") for i in range(4)]
    Job.objects.filter(pk__in=[j.pk for j in jobs]).update(created_at=timezone.now())
    seen, cursor = [], None
    while True:
        body = api.get(
            "/api/v1/compute/jobs", {"limit": 1, **({"cursor": cursor} if cursor else {})}
        ).json()
        seen += [item["id"] for item in body["data"]]
        if not (cursor := body["next_cursor"]):
            break
    assert sorted(seen) == sorted(j.public_id for j in jobs)
    assert len(seen) == 4


def test_the_list_filters_by_project_and_state(api, org, other_org):
    project = ProjectFactory(organization=org)
    in_project = make_job(org, project=project.public_id)
    running = make_job(org, state=JobState.RUNNING)
    make_job(other_org)

    by_project = api.get("/api/v1/compute/jobs", {"project": project.public_id}).json()
    assert [j["id"] for j in by_project["data"]] == [in_project.public_id]
    assert by_project["total"] == 1

    by_state = api.get("/api/v1/compute/jobs", {"state": "running"}).json()
    assert [j["id"] for j in by_state["data"]] == [running.public_id]
    assert by_state["total"] == 1

    everything = api.get("/api/v1/compute/jobs").json()
    assert everything["total"] == 2


@pytest.mark.parametrize(
    ("params", "param"),
    [
        ({"state": "sleeping"}, "state"),
        ({"limit": "0"}, "limit"),
        ({"limit": "x"}, "limit"),
        ({"cursor": "!!!"}, "cursor"),
    ],
)
def test_bad_list_parameters_are_400(api, org, params, param):
    response = api.get("/api/v1/compute/jobs", params)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == param


def test_another_orgs_project_filter_is_404(api, other_project):
    response = api.get("/api/v1/compute/jobs", {"project": other_project.public_id})
    assert response.status_code == 404


def test_terminating_a_queued_job_ends_it_at_once(api, org):
    job = make_job(org)
    response = api.post(f"/api/v1/compute/jobs/{job.public_id}/terminate")
    assert response.status_code == 200
    body = response.json()
    assert (body["state"], body["reason"]) == ("terminated", "cancelled")
    assert body["terminal_at"] is not None
    types = list(JobEvent.objects.filter(job=job).values_list("type", "data__to"))
    assert types == [
        ("job_created", None),
        ("terminate_requested", None),
        ("state_changed", "terminating"),
        ("state_changed", "terminated"),
    ]


def test_terminating_a_running_job_goes_terminating(api, org):
    job = make_job(org, state=JobState.RUNNING)
    body = api.post(f"/api/v1/compute/jobs/{job.public_id}/terminate").json()
    assert (body["state"], body["reason"]) == ("terminating", "cancelled")


@pytest.mark.parametrize("state", [JobState.RUNNING, JobState.REQUESTED, JobState.SUCCEEDED])
def test_terminate_is_idempotent(api, org, state):
    job = make_job(org, state=state)
    first = api.post(f"/api/v1/compute/jobs/{job.public_id}/terminate").json()
    events = JobEvent.objects.filter(job=job).count()
    second = api.post(f"/api/v1/compute/jobs/{job.public_id}/terminate")
    assert second.status_code == 200
    assert second.json()["state"] == first["state"]
    assert JobEvent.objects.filter(job=job).count() == events


def test_terminating_a_finalizing_job_leaves_it_to_end_with_its_outcome(api, org):
    """Its workload has exited: the job ends on its own in a moment (it was a 500 once)."""
    job = make_job(org, state=JobState.FINALIZING)
    answer = api.post(f"/api/v1/compute/jobs/{job.public_id}/terminate")
    assert answer.status_code == 200
    assert answer.json()["state"] == "finalizing"
    assert not JobEvent.objects.filter(job=job, type="terminate_requested").exists()


def test_a_viewer_cannot_terminate(api_client_for, org):
    job = make_job(org)
    response = api_client_for(org, role="viewer").post(
        f"/api/v1/compute/jobs/{job.public_id}/terminate"
    )
    assert response.status_code == 403
    job.refresh_from_db()
    assert job.state == "requested"


def _add_logs(job, count, source="user", start=0):
    now = timezone.now()
    services.logs_append(
        job=job,
        attempt=1,
        lines=[
            services.LogLineIn(
                timestamp=now + timedelta(milliseconds=i),
                message=f"{source} line {i}",
                source=source,
                stream="stderr" if i % 3 == 0 else "stdout",
            )
            for i in range(start, start + count)
        ],
    )


def test_logs_page_oldest_first_by_default_with_the_reference_shape(api, org):
    job = make_job(org)
    _add_logs(job, 5)
    body = api.get(f"/api/v1/compute/jobs/{job.public_id}/logs", {"limit": 2}).json()
    assert body["total"] == 5
    assert [line["message"] for line in body["data"]] == ["user line 0", "user line 1"]
    first = body["data"][0]
    assert set(first) == {"id", "timestamp", "source", "stream", "message", "attempt"}
    assert first["id"].startswith("log_")
    assert (first["source"], first["stream"]) == ("user", "stderr")

    messages, cursor = [], None
    while True:
        params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = api.get(f"/api/v1/compute/jobs/{job.public_id}/logs", params).json()
        messages += [line["message"] for line in page["data"]]
        if not (cursor := page["next_cursor"]):
            break
    assert messages == [f"user line {i}" for i in range(5)]


def test_logs_filter_by_source_and_order_desc(api, org):
    job = make_job(org)
    _add_logs(job, 3, source="user")
    _add_logs(job, 2, source="system")
    system = api.get(f"/api/v1/compute/jobs/{job.public_id}/logs", {"source": "system"}).json()
    assert [line["message"] for line in system["data"]] == ["system line 0", "system line 1"]
    assert system["total"] == 2
    desc = api.get(
        f"/api/v1/compute/jobs/{job.public_id}/logs",
        {"source": "user", "order": "desc", "limit": 2},
    ).json()
    assert [line["message"] for line in desc["data"]] == ["user line 2", "user line 1"]
    assert desc["total"] == 3
    rest = api.get(
        f"/api/v1/compute/jobs/{job.public_id}/logs",
        {"source": "user", "order": "desc", "limit": 2, "cursor": desc["next_cursor"]},
    ).json()
    assert [line["message"] for line in rest["data"]] == ["user line 0"]
    assert rest["next_cursor"] is None
    assert LogLine.objects.filter(job=job).count() == 5


def test_bad_log_parameters_are_400(api, org):
    job = make_job(org)
    for params, param in [({"source": "kernel"}, "source"), ({"order": "sideways"}, "order")]:
        response = api.get(f"/api/v1/compute/jobs/{job.public_id}/logs", params)
        assert response.status_code == 400
        assert response.json()["error"]["param"] == param


def test_events_list_the_lifecycle(api, org):
    job = make_job(org, state=JobState.RUNNING)
    body = api.get(f"/api/v1/compute/jobs/{job.public_id}/events").json()
    assert body["total"] == 4
    assert [e["type"] for e in body["data"]] == ["job_created"] + ["state_changed"] * 3
    assert [e["data"].get("to") for e in body["data"]][1:] == [
        "allocating",
        "provisioning",
        "running",
    ]
    assert body["data"][0]["id"].startswith("evt_")
