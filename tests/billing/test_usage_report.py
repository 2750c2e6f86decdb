"""`GET /api/v1/compute/usage` and `/usage.csv`: each job's billed seconds and dollars in a
window, from the ledger's posted usage; the CSV, the JSON summary and the jobs' own
`accrued_usd` always agree."""

from __future__ import annotations

import csv
import io
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from apps.accounts.models import Role
from apps.billing import ledger
from apps.billing.models import Transfer
from apps.jobs.models import Attempt, Job
from tests.billing.api_helpers import PRICE, billed_job, roomy_offer, second_attempt

pytestmark = pytest.mark.django_db
URL = "/api/v1/compute/usage"
CSV_URL = "/api/v1/compute/usage.csv"


@pytest.fixture(autouse=True)
def offer(make_offer):
    return roomy_offer(make_offer)


@pytest.fixture
def jobs(org) -> list[Job]:
    """Three jobs: 10 minutes; 3 minutes then 4 more at twice the price; 25 minutes."""
    first = billed_job(org, minutes=10, name="first")
    second = second_attempt(billed_job(org, minutes=3, name="second"), minutes=4)
    third = billed_job(org, minutes=25, name="third")
    return [first, second, third]


def rows_of_csv(response) -> list[dict]:
    text = b"".join(response.streaming_content).decode()
    return list(csv.DictReader(io.StringIO(text)))


def micros(usd: str | float) -> int:
    return int(Decimal(str(usd)) * 1_000_000)


def test_each_job_is_one_row_with_its_seconds_and_dollars(api_client_for, org, jobs):
    response = api_client_for(org, Role.VIEWER).get(URL)
    assert response.status_code == 200
    body = response.json()
    assert body["data"] == [
        {
            "resource_type": "job",
            "resource_id": jobs[0].public_id,
            "name": "first",
            "billable_seconds": 600,
            "accrued_usd": 0.1,
        },
        {
            "resource_type": "job",
            "resource_id": jobs[1].public_id,
            "name": "second",
            "billable_seconds": 420,
            "accrued_usd": 0.11,
        },
        {
            "resource_type": "job",
            "resource_id": jobs[2].public_id,
            "name": "third",
            "billable_seconds": 1500,
            "accrued_usd": 0.25,
        },
    ]
    assert body["summary"] == {"total_usd": 0.46, "job_usd": 0.46, "service_usd": 0.0}
    assert (body["next_cursor"], body["total"]) == (None, 3)


def test_the_window_defaults_to_the_last_thirty_days(api_client_for, org, jobs):
    before = timezone.now()
    window = api_client_for(org).get(URL).json()["window"]
    start, end = (timezone.datetime.fromisoformat(window[k]) for k in ("from", "to"))
    assert before <= end <= timezone.now()
    assert end - start == timedelta(days=30)


def test_usage_outside_the_window_is_left_out(api_client_for, org, jobs):
    attempt = Attempt.objects.get(job=jobs[0])
    ledger.transfer(
        organization_id=org.pk,
        debit=ledger.Kind.WALLET,
        credit=ledger.Kind.USAGE,
        amount_micros=777_000,
        code=ledger.Code.USAGE,
        idempotency_key="old-usage",
        project_id=jobs[0].project_id,
        job_id=jobs[0].pk,
        attempt_id=attempt.pk,
        minutes=5,
        created_at=timezone.now() - timedelta(days=40),
    )
    api = api_client_for(org)
    assert api.get(URL).json()["summary"]["total_usd"] == 0.46
    long_ago = (timezone.now() - timedelta(days=45)).isoformat()
    wide = api.get(URL, {"from": long_ago}).json()
    assert wide["summary"]["total_usd"] == pytest.approx(0.46 + 0.777)
    assert wide["data"][0]["billable_seconds"] == 600 + 300
    only_then = api.get(
        URL, {"from": long_ago, "to": (timezone.now() - timedelta(days=35)).isoformat()}
    ).json()
    assert [(r["name"], r["accrued_usd"]) for r in only_then["data"]] == [("first", 0.777)]


def test_from_and_to_take_dates_and_times_with_or_without_a_zone(api_client_for, org, jobs):
    api = api_client_for(org)
    tomorrow = (timezone.now() + timedelta(days=1)).date().isoformat()
    assert api.get(URL, {"to": tomorrow}).json()["total"] == 3
    body = api.get(URL, {"from": "2020-01-01T00:00:00", "to": "2020-02-01T00:00:00Z"}).json()
    assert body["window"] == {
        "from": "2020-01-01T00:00:00+00:00",
        "to": "2020-02-01T00:00:00+00:00",
    }
    assert (body["data"], body["total"], body["summary"]["total_usd"]) == ([], 0, 0.0)
    # `+` unescaped in a query string arrives as a space
    spaced = api.get(f"{URL}?from=2020-01-01T00:00:00+01:00&to=2020-01-02T00:00:00+01:00")
    assert spaced.json()["window"]["from"] == "2019-12-31T23:00:00+00:00"


@pytest.mark.parametrize("url", [URL, CSV_URL])
@pytest.mark.parametrize(
    ("params", "param"),
    [
        ({"from": "yesterday"}, "from"),
        ({"to": "2025-13-01"}, "to"),
        ({"from": "2025-02-01", "to": "2025-01-01"}, "from"),
        ({"resource_type": "vm"}, "resource_type"),
    ],
)
def test_bad_filters_are_400_naming_the_parameter(api_client_for, org, url, params, param):
    response = api_client_for(org).get(url, params)
    assert response.status_code == 400
    assert response.json()["error"] == {
        "type": "invalid_request",
        "message": response.json()["error"]["message"],
        "param": param,
    }


@pytest.mark.parametrize("url", [URL, CSV_URL])
@pytest.mark.parametrize(
    "params",
    [
        {"to": "0001-01-01"},
        {"from": "0001-01-01T00:00:00+05:00"},
        {"to": "9999-12-31T23:59:59-05:00"},
        {"to": "8789-08-30T22:17:16+21:50"},
    ],
)
def test_times_at_the_ends_of_the_calendar_are_an_empty_window_not_an_error(
    api_client_for, org, url, params
):
    response = api_client_for(org).get(url, params)
    assert response.status_code == 200


def test_resource_type_filters_rows_and_summary(api_client_for, org, jobs):
    api = api_client_for(org)
    services = api.get(URL, {"resource_type": "service"}).json()
    assert (services["data"], services["total"]) == ([], 0)
    assert services["summary"] == {"total_usd": 0.0, "job_usd": 0.0, "service_usd": 0.0}
    assert api.get(URL, {"resource_type": "job"}).json()["total"] == 3


def test_pages_are_by_keyset_and_the_summary_covers_every_row(api_client_for, org, jobs):
    api = api_client_for(org)
    first = api.get(URL, {"limit": 2}).json()
    second = api.get(URL, {"limit": 2, "cursor": first["next_cursor"]}).json()
    assert [r["name"] for r in first["data"]] == ["first", "second"]
    assert [r["name"] for r in second["data"]] == ["third"]
    assert first["total"] == second["total"] == 3
    assert (
        first["summary"]
        == second["summary"]
        == {
            "total_usd": 0.46,
            "job_usd": 0.46,
            "service_usd": 0.0,
        }
    )
    assert second["next_cursor"] is None
    assert api.get(URL, {"cursor": "bm9wZQ"}).json()["error"]["param"] == "cursor"


def test_another_organizations_usage_never_appears(api_client_for, org, other_org, jobs):
    billed_job(other_org, minutes=50, name="theirs")
    api = api_client_for(org)
    assert "theirs" not in {r["name"] for r in api.get(URL).json()["data"]}
    assert api.get(URL).json()["summary"]["total_usd"] == 0.46
    assert "theirs" not in {r["name"] for r in rows_of_csv(api.get(CSV_URL))}


def test_the_csv_json_summary_and_jobs_accrued_spend_agree(api_client_for, org, jobs):
    api = api_client_for(org)
    response = api.get(CSV_URL)
    assert response.status_code == 200
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert response["Content-Disposition"].startswith('attachment; filename="usage-')
    rows = rows_of_csv(response)
    assert list(rows[0]) == [
        "resource_type",
        "resource_id",
        "name",
        "billable_seconds",
        "accrued_usd",
    ]
    assert [(r["resource_id"], r["billable_seconds"]) for r in rows] == [
        (jobs[0].public_id, "600"),
        (jobs[1].public_id, "420"),
        (jobs[2].public_id, "1500"),
    ]
    csv_total = sum(micros(r["accrued_usd"]) for r in rows)
    summary = api.get(URL).json()["summary"]
    accrued = sum(Job.objects.get(pk=j.pk).accrued_micros for j in jobs)
    usage = sum(
        Transfer.objects.filter(organization=org, code="usage").values_list(
            "amount_micros", flat=True
        )
    )
    assert csv_total == micros(summary["total_usd"]) == accrued == usage == 460_000
    by_job = {r["resource_id"]: micros(r["accrued_usd"]) for r in rows}
    api_jobs = {j.public_id: api.get(f"/api/v1/compute/jobs/{j.public_id}").json() for j in jobs}
    assert by_job == {pid: micros(job["accrued_usd"]) for pid, job in api_jobs.items()}
    assert by_job[jobs[1].public_id] == 3 * PRICE // 60 + 4 * 2 * PRICE // 60


def test_the_csv_works_with_a_signed_in_session_and_any_accept_header(
    client_for, viewer, org, jobs
):
    response = client_for(viewer).get(CSV_URL, HTTP_ACCEPT="text/csv")
    assert response.status_code == 200
    assert len(rows_of_csv(response)) == 3


def test_the_csv_needs_a_caller(client):
    response = client.get(CSV_URL)
    assert (response.status_code, response.json()["error"]["type"]) == (401, "unauthenticated")


def test_a_name_a_spreadsheet_would_run_as_a_formula_is_quoted(api_client_for, org):
    billed_job(org, minutes=1, name="=HYPERLINK(1)")
    (row,) = rows_of_csv(api_client_for(org).get(CSV_URL))
    assert row["name"] == "'=HYPERLINK(1)"
