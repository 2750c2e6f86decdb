"""An ended job's `logs.txt` from its archive: one gzip file written once, served as it is
(or decompressed on the fly) while it still holds the whole log; the database otherwise."""

import gzip
import json

import pytest
import redis
from django.core.files.storage import default_storage
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.accounts import services as account_services
from apps.jobs import enqueue, services
from apps.jobs.models import Job
from apps.jobs.states import JobState as S
from apps.jobs.telemetry import log_archive
from tests.jobs.helpers import append_log, asgi_request, make_job

pytestmark = pytest.mark.django_db

MESSAGES = [f"step {n}: loss 0.{n:03d} — naïve 日本語 ✓ \\ tab\there" for n in range(30)]


@pytest.fixture
def api(api_client_for, org):
    return api_client_for(org)


@pytest.fixture(autouse=True)
def media(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path / "media"
    return settings.MEDIA_ROOT


@pytest.fixture(autouse=True)
def broker(settings):
    """The real broker's default queue, without build messages or pending asks (job ids
    start again with each test database) before and after each test."""
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    _clear(client)
    yield client
    _clear(client)


def _clear(client: redis.Redis) -> None:
    _sent_builds(client)
    pending = list(client.scan_iter(log_archive.PENDING_KEY.format(job_id="*")))
    if pending:
        client.delete(*pending)


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch):
    """Several chunks to build from, and several blocks to serve (inflated in pieces), for a
    short log."""
    monkeypatch.setattr(log_archive, "CHUNK_LINES", 7)
    monkeypatch.setattr(log_archive, "READ_BYTES", 64)
    monkeypatch.setattr(log_archive, "INFLATED_BYTES", 50)


def _sent_builds(client: redis.Redis) -> list[int]:
    """The job ids of the `jobs.archive_log` messages queued, oldest first (taken off the
    queue), and no build left pending for them."""
    ids = []
    for raw in reversed(client.lrange("celery", 0, -1)):  # the transport pushes on the left
        headers = json.loads(raw)["headers"]
        if headers["task"] == enqueue.ARCHIVE_LOG:
            ids.append(json.loads(headers["argsrepr"])[0])
            client.lrem("celery", 0, raw)
    for job_id in ids:
        client.delete(log_archive.PENDING_KEY.format(job_id=job_id))
    return ids


def _ended_job(org, state=S.FAILED):
    job = make_job(org, state=state)
    append_log(job, MESSAGES[:10])
    append_log(job, ["Allocated cpu x1 on local.", "Exit code 1."], source="system")
    append_log(job, MESSAGES[10:])
    return job


def _get(api, job, *, gzipped: bool, **params):
    """(response, body, whether the body was read from the log table)."""
    headers = {"HTTP_ACCEPT_ENCODING": "gzip"} if gzipped else {}
    with CaptureQueriesContext(connection) as queries:
        response = api.get(f"/api/v1/compute/jobs/{job.public_id}/logs.txt", params, **headers)
        body = b"".join(response)  # the sync test client consumes the async stream
    from_table = any("string_agg" in query["sql"] for query in queries.captured_queries)
    return response, body, from_table


def _files(media) -> list[str]:
    logs = media / "logs"
    return sorted(path.name for path in logs.iterdir()) if logs.exists() else []


def test_the_archive_serves_the_same_bytes_as_the_database_gzip_and_plain(api, org, broker):
    job = _ended_job(org)
    expected = "\n".join([*MESSAGES[:10], "Allocated cpu x1 on local.", "Exit code 1."])
    expected = (expected + "\n" + "\n".join(MESSAGES[10:]) + "\n").encode()
    before = {gzipped: _get(api, job, gzipped=gzipped) for gzipped in (True, False)}
    assert all(from_table for _, _, from_table in before.values())
    assert _sent_builds(broker) == [job.pk]  # an ended job read without an archive asks

    assert log_archive.build(job.pk) is True
    after = {gzipped: _get(api, job, gzipped=gzipped) for gzipped in (True, False)}

    for gzipped in (True, False):
        old_response, old_body, _ = before[gzipped]
        response, body, from_table = after[gzipped]
        assert not from_table
        assert body == old_body  # byte for byte, the gzip stream too
        for header in ("Content-Type", "Content-Disposition", "X-Trainyard-Log-Lines", "Vary"):
            assert response[header] == old_response[header]
        assert response.get("Content-Encoding") == old_response.get("Content-Encoding")
    assert after[True][0]["Content-Encoding"] == "gzip"
    assert gzip.decompress(after[True][1]) == expected == after[False][1]
    assert after[False][0]["X-Trainyard-Log-Lines"] == "32"
    job.refresh_from_db()
    assert job.log_archive_name == f"logs/{job.public_id}.log.gz"
    assert job.log_archive_lines == 32
    assert default_storage.open(job.log_archive_name).read() == before[True][1]
    assert _sent_builds(broker) == []  # a current archive asks for nothing


def test_a_line_after_the_archive_is_read_from_the_database_and_the_archive_rebuilt(
    api, org, broker, media, django_capture_on_commit_callbacks
):
    job = _ended_job(org, state=S.TERMINATED)
    log_archive.build(job.pk)
    first = Job.objects.get(pk=job.pk).log_archive_name
    services.system_log(job=job, attempt=1, message="A late line: the runner's last flush.")

    for gzipped in (True, False):
        response, body, from_table = _get(api, job, gzipped=gzipped)
        text = (gzip.decompress(body) if gzipped else body).decode()
        assert from_table
        assert text.endswith(f"{MESSAGES[-1]}\nA late line: the runner's last flush.\n")
        assert text.count("\n") == 33 and response["X-Trainyard-Log-Lines"] == "33"
    assert _sent_builds(broker) == [job.pk]  # the two reads asked once (they coalesce)

    with django_capture_on_commit_callbacks(execute=True):  # a worker's build commits
        assert log_archive.build(job.pk) is True
    rebuilt = Job.objects.get(pk=job.pk)
    assert rebuilt.log_archive_name != first and rebuilt.log_archive_lines == 33
    assert _files(media) == [rebuilt.log_archive_name.removeprefix("logs/")]  # old one gone
    _, body, from_table = _get(api, job, gzipped=False)
    assert not from_table and body.decode().endswith("the runner's last flush.\n")


def test_building_twice_leaves_one_file_and_the_same_row(org, media):
    job = _ended_job(org, state=S.SUCCEEDED)

    assert log_archive.build(job.pk) is True
    row = Job.objects.filter(pk=job.pk).values(
        "log_archive_name", "log_archive_last_id", "log_archive_lines"
    )
    first = row.get()
    assert log_archive.build(job.pk) is False

    assert row.get() == first
    assert first["log_archive_last_id"] == job.log_lines.order_by("-id").first().pk
    assert _files(media) == [f"{job.public_id}.log.gz"]


def test_a_file_gone_from_storage_is_read_from_the_database_and_built_again(
    api, org, broker, media
):
    job = _ended_job(org)
    log_archive.build(job.pk)
    default_storage.delete(Job.objects.get(pk=job.pk).log_archive_name)

    _, body, from_table = _get(api, job, gzipped=True)

    assert from_table and gzip.decompress(body).decode().count("\n") == 32
    assert _sent_builds(broker) == [job.pk]
    assert log_archive.build(job.pk) is True
    assert _files(media) == [f"{job.public_id}.log.gz"]


def test_a_running_job_is_never_archived_and_reads_ask_for_nothing(api, org, broker, media):
    job = make_job(org, state=S.RUNNING)
    append_log(job, MESSAGES)

    _, body, from_table = _get(api, job, gzipped=False)

    assert from_table and body.decode() == "\n".join(MESSAGES) + "\n"
    assert log_archive.build(job.pk) is False
    assert _files(media) == [] and _sent_builds(broker) == []


def test_source_never_uses_the_archive(api, org, broker):
    job = _ended_job(org)
    log_archive.build(job.pk)

    user_response, user, user_from_table = _get(api, job, gzipped=False, source="user")
    _, system, system_from_table = _get(api, job, gzipped=True, source="system")

    assert user_from_table and user.decode() == "\n".join(MESSAGES) + "\n"
    assert user_response["X-Trainyard-Log-Lines"] == "30"
    assert system_from_table
    assert gzip.decompress(system) == b"Allocated cpu x1 on local.\nExit code 1.\n"
    assert _sent_builds(broker) == []


def test_the_archive_streams_through_the_asgi_handler_as_a_server_runs_it(org):
    job = _ended_job(org)
    log_archive.build(job.pk)
    _, key = account_services.api_key_create(organization=org, name="asgi")
    path = f"/api/v1/compute/jobs/{job.public_id}/logs.txt"

    packed = asgi_request(
        "GET", path, headers={"Authorization": f"Bearer {key}", "Accept-Encoding": "gzip"}
    )
    plain = asgi_request("GET", path, headers={"Authorization": f"Bearer {key}"})

    assert packed[0] == plain[0] == 200
    assert packed[1] == default_storage.open(Job.objects.get(pk=job.pk).log_archive_name).read()
    assert gzip.decompress(packed[1]) == plain[1] and plain[1].decode().count("\n") == 32


def test_another_organizations_archived_job_is_still_a_404(api, other_org):
    theirs = _ended_job(other_org)
    log_archive.build(theirs.pk)

    response = api.get(f"/api/v1/compute/jobs/{theirs.public_id}/logs.txt")

    assert response.status_code == 404 and response.json()["error"]["type"] == "not_found"


def test_an_empty_log_archives_as_an_empty_gzip(api, org):
    job = make_job(org, state=S.FAILED)
    assert log_archive.build(job.pk) is True

    _, packed_body, packed_from_table = _get(api, job, gzipped=True)
    _, plain, plain_from_table = _get(api, job, gzipped=False)

    assert not packed_from_table and not plain_from_table
    assert gzip.decompress(packed_body) == b"" and plain == b""


def test_the_archive_is_stored_in_s3_when_storage_is_s3(api, org, s3_bucket):
    job = _ended_job(org)
    _, from_database, _ = _get(api, job, gzipped=True)

    assert log_archive.build(job.pk) is True
    _, packed, packed_from_table = _get(api, job, gzipped=True)
    _, plain, plain_from_table = _get(api, job, gzipped=False)

    assert s3_bucket.keys() == [f"logs/{job.public_id}.log.gz"]
    assert s3_bucket.read(f"logs/{job.public_id}.log.gz") == packed == from_database
    assert not packed_from_table and not plain_from_table
    assert plain == gzip.decompress(packed)


def test_each_terminal_transition_sends_the_build_on_commit(
    org, broker, django_capture_on_commit_callbacks
):
    finishing = make_job(org, state=S.RUNNING)
    waiting, stopping = make_job(org), make_job(org, state=S.TERMINATING)

    with django_capture_on_commit_callbacks(execute=True):
        services.job_transition(job_id=finishing.pk, to=S.FINALIZING)
    assert _sent_builds(broker) == []  # not ended yet
    with django_capture_on_commit_callbacks(execute=True):
        services.job_transition(job_id=finishing.pk, to=S.SUCCEEDED)
        services.job_transition(job_id=waiting.pk, to=S.FAILED, reason="no_capacity")
        services.job_transition(job_id=stopping.pk, to=S.TERMINATED, reason="cancelled")

    assert _sent_builds(broker) == [finishing.pk, waiting.pk, stopping.pk]
