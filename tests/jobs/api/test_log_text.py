"""A job's whole log as plain text (`logs.txt`), and JSON log pages up to 10,000 lines
rendered from rows exactly as the serializer would."""

import gzip
import json
from datetime import UTC, datetime

import pytest
from rest_framework.renderers import JSONRenderer

from apps.jobs.api.serializers import LogLineOut
from apps.jobs.models import LogLine
from apps.jobs.telemetry import log_archive
from tests.jobs.helpers import append_log, make_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(api_client_for, org):
    return api_client_for(org)


def _text(response) -> bytes:
    return b"".join(response)  # the sync test client consumes the async stream


def test_the_whole_log_comes_as_plain_text_in_order_across_chunks(api, org, monkeypatch):
    monkeypatch.setattr(log_archive, "CHUNK_LINES", 7)  # several chunks for 20 lines
    job = make_job(org)
    messages = [f"step {n}\twith a tab and a \\ backslash é" for n in range(20)]
    append_log(job, messages[:10])
    append_log(job, ["control plane says hi"], source="system")
    append_log(job, messages[10:])
    response = api.get(f"/api/v1/compute/jobs/{job.public_id}/logs.txt")
    assert response.status_code == 200
    assert response["Content-Type"] == "text/plain; charset=utf-8"
    assert "Content-Encoding" not in response
    everything = _text(response).decode()
    assert everything == "\n".join([*messages[:10], "control plane says hi", *messages[10:]]) + "\n"
    assert response["X-Trainyard-Log-Lines"] == "21"
    user = _text(api.get(f"/api/v1/compute/jobs/{job.public_id}/logs.txt", {"source": "user"}))
    assert user.decode() == "\n".join(messages) + "\n"


def test_it_is_gzipped_when_the_client_accepts_it(api, org):
    job = make_job(org)
    append_log(job, [f"line {n}" for n in range(500)])
    path = f"/api/v1/compute/jobs/{job.public_id}/logs.txt"
    packed = api.get(path, HTTP_ACCEPT_ENCODING="br, gzip;q=0.8")
    assert packed["Content-Encoding"] == "gzip" and packed["Vary"] == "Accept-Encoding"
    body = _text(packed)
    assert gzip.decompress(body).decode() == "".join(f"line {n}\n" for n in range(500))
    assert len(body) < len(gzip.decompress(body)) / 3
    refused = api.get(path, HTTP_ACCEPT_ENCODING="gzip;q=0")
    assert "Content-Encoding" not in refused


def test_an_empty_log_is_empty_and_a_bad_source_or_foreign_job_is_refused(api, org, other_org):
    job = make_job(org)
    assert _text(api.get(f"/api/v1/compute/jobs/{job.public_id}/logs.txt")) == b""
    bad = api.get(f"/api/v1/compute/jobs/{job.public_id}/logs.txt", {"source": "kernel"})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "source"
    theirs = make_job(other_org)
    missing = api.get(f"/api/v1/compute/jobs/{theirs.public_id}/logs.txt")
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "not_found"


def test_a_json_log_page_takes_up_to_10000_lines_and_a_cursor_goes_on_from_there(api, org):
    job = make_job(org)
    append_log(job, [f"l{n}" for n in range(10_005)])
    path = f"/api/v1/compute/jobs/{job.public_id}/logs"
    first = api.get(path, {"limit": 10_000, "order": "asc"}).json()
    assert [line["message"] for line in first["data"]] == [f"l{n}" for n in range(10_000)]
    assert first["total"] == 10_005 and first["next_cursor"]
    rest = api.get(path, {"limit": 10_000, "cursor": first["next_cursor"]}).json()
    assert [line["message"] for line in rest["data"]] == [f"l{n}" for n in range(10_000, 10_005)]
    assert rest["next_cursor"] is None
    too_many = api.get(path, {"limit": 10_001})
    assert too_many.status_code == 400 and too_many.json()["error"]["param"] == "limit"


def test_a_json_log_page_reads_as_the_serializer_renders_each_line(api, org):
    job = make_job(org)
    append_log(job, ["plain", 'tab\tquote" backslash\\ é ☃ \u2028 end', ""])
    append_log(job, ["the platform speaks"], source="system")
    LogLine.objects.filter(job=job, message="plain").update(stream="stderr")
    whole_second = datetime(2026, 12, 6, 22, 0, 1, tzinfo=UTC)  # written without a fraction
    LogLine.objects.filter(job=job, message="").update(timestamp=whole_second)
    response = api.get(f"/api/v1/compute/jobs/{job.public_id}/logs", {"limit": 10})
    assert response.status_code == 200 and response["Content-Type"] == "application/json"
    lines = LogLine.objects.filter(job=job).in_log_order()
    expected = json.loads(JSONRenderer().render(LogLineOut(lines, many=True).data))
    assert response.json() == {"data": expected, "next_cursor": None, "total": 4}
    assert [line["timestamp"][-1] for line in expected] == ["Z"] * 4
    assert "2026-12-06T22:00:01Z" in [line["timestamp"] for line in expected]


def test_a_large_json_log_page_is_gzipped_when_the_client_accepts_it(api, org):
    job = make_job(org)
    append_log(job, [f"line {n} of a log that compresses well" for n in range(2000)])
    path = f"/api/v1/compute/jobs/{job.public_id}/logs"
    plain = api.get(path, {"limit": 2000})
    packed = api.get(path, {"limit": 2000}, HTTP_ACCEPT_ENCODING="gzip, deflate")
    assert "Content-Encoding" not in plain and plain["Vary"] == "Accept-Encoding"
    assert packed["Content-Encoding"] == "gzip"
    assert len(packed.content) < len(plain.content) / 5
    assert gzip.decompress(packed.content) == plain.content
    small = api.get(path, {"limit": 2}, HTTP_ACCEPT_ENCODING="gzip")
    assert "Content-Encoding" not in small and len(small.json()["data"]) == 2
    refused = api.get(path, {"limit": 2000}, HTTP_ACCEPT_ENCODING="gzip;q=0")
    assert "Content-Encoding" not in refused
