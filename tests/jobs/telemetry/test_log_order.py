"""Issue 38, point 16: a runner batch held up longer than ingestion waits for its
predecessor (a control-plane outage) is stored after its successor, with higher ids; the
log still reads in the runner's order everywhere it is read back (the logs API with its
cursors, logs.txt, the job page and its "older lines"). Batches go through the real runner
endpoint, reads through the API and the page, on the real database."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from django.test import Client

from apps.core.pagination import encode_cursor
from apps.jobs import services
from apps.jobs.execution import dispatch
from apps.jobs.execution.tokens import token_for
from apps.jobs.live import partials
from apps.jobs.models import Job, LogLine
from apps.jobs.states import JobState
from apps.jobs.telemetry import ingestion, log_archive
from tests.jobs.helpers import make_job

pytestmark = pytest.mark.django_db

IN_ORDER = [f"line-{n:03d}" for n in range(1, 201)]


def _batch(seqs, **extra) -> dict:
    now = datetime.now(UTC).isoformat()
    lines = [
        {"seq": n, "ts": now, "source": "user", "stream": "stdout", "message": f"line-{n:03d}"}
        for n in seqs
    ]
    return {"lines": lines, **extra}


@pytest.fixture
def late_job(org, monkeypatch) -> Job:
    """A job whose second batch (seqs 101-200, `follows: 100`) was stored before its first
    (seqs 1-100): the wait for the predecessor ran out, as in an outage longer than it.
    A control-plane line written between them reads after line 200."""
    monkeypatch.setattr(ingestion, "FOLLOW_WAIT_S", 0.01)
    job = make_job(org)
    attempt = dispatch.allocate(job.pk)
    services.job_transition(job_id=job.pk, to=JobState.PROVISIONING)
    runner = Client(HTTP_AUTHORIZATION=f"Bearer {token_for(attempt.token_nonce)}")
    path = f"/api/v1/runner/jobs/{job.public_id}/logs"

    def post(body):
        return runner.post(path, body, content_type="application/json")

    assert post(_batch(range(101, 201), follows=100)).json()["accepted"] == 100
    services.system_log(job=job, attempt=attempt.number, message="between the batches")
    assert post(_batch(range(1, 101))).json()["accepted"] == 100
    by_id = LogLine.objects.filter(job=job, seq__isnull=False).order_by("id")
    assert by_id.first().seq == 101  # stored out of order: ids alone would read it wrong
    return Job.objects.get(pk=job.pk)


def _messages(page: dict) -> list[str]:
    return [line["message"] for line in page["data"]]


def _numbered(text: str) -> list[str]:
    return re.findall(r"line-\d{3}", text)


def test_the_logs_api_reads_the_runners_order_and_a_cursor_continues_it(
    late_job, api_client_for, org
):
    api = api_client_for(org)
    path = f"/api/v1/compute/jobs/{late_job.public_id}/logs"

    whole = api.get(path, {"limit": 5000, "source": "user"})
    assert whole.status_code == 200
    assert _messages(whole.json()) == IN_ORDER

    first = api.get(path, {"limit": 150, "source": "user"}).json()
    assert _messages(first) == IN_ORDER[:150]
    rest = api.get(path, {"limit": 150, "source": "user", "cursor": first["next_cursor"]})
    assert rest.status_code == 200
    assert _messages(rest.json()) == IN_ORDER[150:]
    assert rest.json()["next_cursor"] is None

    newest = api.get(path, {"limit": 120, "source": "user", "order": "desc"}).json()
    assert _messages(newest) == IN_ORDER[::-1][:120]
    older = api.get(
        path, {"limit": 120, "source": "user", "order": "desc", "cursor": newest["next_cursor"]}
    ).json()
    assert _messages(older) == IN_ORDER[::-1][120:]

    everything = _messages(api.get(path, {"limit": 5000}).json())
    assert [m for m in everything if m.startswith("line-")] == IN_ORDER
    assert everything.index("between the batches") > everything.index("line-200")


def test_a_cursor_naming_another_jobs_line_is_a_400(late_job, api_client_for, org):
    other = make_job(org)
    services.system_log(job=other, attempt=1, message="elsewhere")
    elsewhere = LogLine.objects.get(job=other)
    answer = api_client_for(org).get(
        f"/api/v1/compute/jobs/{late_job.public_id}/logs",
        {"cursor": encode_cursor([elsewhere.pk])},
    )
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert (error["type"], error["param"]) == ("invalid_request", "cursor")


def test_logs_txt_reads_the_runners_order_across_chunks(late_job, api_client_for, org, monkeypatch):
    monkeypatch.setattr(log_archive, "CHUNK_LINES", 30)  # chunks continue from a place
    api = api_client_for(org)
    path = f"/api/v1/compute/jobs/{late_job.public_id}/logs.txt"
    user = api.get(path, {"source": "user"})
    assert user.status_code == 200
    assert _numbered(b"".join(user).decode()) == IN_ORDER
    whole = b"".join(api.get(path)).decode().splitlines()
    assert [line for line in whole if line.startswith("line-")] == IN_ORDER
    assert whole.index("between the batches") > whole.index("line-200")


def test_the_job_page_and_its_older_lines_read_the_runners_order(late_job, client_for, member, org):
    client = client_for(member)
    page = client.get(f"/o/{org.slug}/jobs/{late_job.public_id}/")
    assert page.status_code == 200
    shown = _numbered(page.content.decode())
    assert shown == IN_ORDER[-len(shown) :] and "line-200" in shown  # the newest window
    first_shown = LogLine.objects.get(job=late_job, message=shown[0])
    older = client.get(f"/o/{org.slug}/jobs/{late_job.public_id}/logs/", {"before": first_shown.pk})
    assert older.status_code == 200
    assert (
        _numbered(older.content.decode())
        == IN_ORDER[: IN_ORDER.index(shown[0])][-partials.WINDOW :]
    )
