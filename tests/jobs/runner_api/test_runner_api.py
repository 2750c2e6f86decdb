"""The runner endpoints, called as the runner calls them (Django test client, real DB)."""

import threading
import time
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from apps.jobs import services
from apps.jobs.execution import attempts, dispatch, reports, supervision
from apps.jobs.execution.tokens import hub_nonce_from, hub_token_for, token_for
from apps.jobs.models import Attempt, Job, LogLine, MetricPoint
from apps.jobs.states import JobState
from apps.jobs.telemetry import ingestion
from apps.secrets import services as secret_services
from tests.jobs.helpers import make_job

pytestmark = pytest.mark.django_db


class Runner:
    def __init__(self, job: Job, attempt: Attempt) -> None:
        self.job, self.attempt = job, attempt
        self.client = Client(HTTP_AUTHORIZATION=f"Bearer {token_for(attempt.token_nonce)}")

    def path(self, endpoint: str, job_id: str | None = None) -> str:
        return f"/api/v1/runner/jobs/{job_id or self.job.public_id}/{endpoint}"

    def get(self, endpoint: str, **kw):
        return self.client.get(self.path(endpoint, **kw))

    def post(self, endpoint: str, body: dict | None = None, **kw):
        return self.client.post(
            self.path(endpoint, **kw), body or {}, content_type="application/json"
        )


def _allocated(org, **overrides) -> Runner:
    job = make_job(org, **overrides)
    attempt = dispatch.allocate(job.pk)
    services.job_transition(job_id=job.pk, to=JobState.PROVISIONING)
    return Runner(Job.objects.get(pk=job.pk), attempt)


def _line(seq, message, source="user", stream="stdout"):
    return {
        "seq": seq,
        "ts": datetime.now(UTC).isoformat(),
        "source": source,
        "stream": stream,
        "message": message,
    }


def test_the_spec_carries_env_resolved_secrets_and_masks(org, settings):
    settings.TRAINYARD_HF_ENDPOINT = "https://hub.example"
    secret = secret_services.secret_create(organization=org, name="hub", data={"T": "s3cr3t-v"})
    runner = _allocated(
        org,
        container={
            "image": "img",
            "command": ["echo", "hi"],
            "env": {"A": "1"},
            "secret_env": {"HF_TOKEN": {"secret_id": secret.public_id, "key": "T"}},
        },
    )
    body = runner.get("spec").json()
    assert body["command"] == ["echo", "hi"]
    assert body["env"] == {
        "A": "1",
        "HF_TOKEN": "s3cr3t-v",
        "TRAINYARD_JOB_ID": runner.job.public_id,
        "TRAINYARD_ATTEMPT": "1",
        "TRAINYARD_CHECKPOINT_DIR": "checkpoints",
        "TRAINYARD_RESUME_FROM": "",
        "HF_ENDPOINT": "https://hub.example",
    }
    assert body["mask"] == ["s3cr3t-v"]


def test_the_spec_gives_the_workload_this_hub_and_a_masked_token_of_its_attempt(org):
    runner = _allocated(org, container={"image": "img", "command": ["true"], "env": {}})

    body = runner.get("spec").json()

    token = hub_token_for(runner.attempt.token_nonce)
    assert body["hub"] == {"path": "/hf"}
    assert body["env"]["HF_TOKEN"] == token
    assert "HF_ENDPOINT" not in body["env"]  # the runner knows how it reaches this server
    assert body["env"]["TRAINYARD_HUB_NAMESPACE"] == org.slug
    assert body["mask"] == [token]
    assert hub_nonce_from(token) == runner.attempt.token_nonce
    assert hub_nonce_from(token.replace("tyh_", "tyr_")) is None


def test_a_missing_or_forged_token_is_401(org):
    runner = _allocated(org)
    assert Client().get(runner.path("spec")).status_code == 401
    forged = Client(HTTP_AUTHORIZATION=f"Bearer tyr_{runner.attempt.token_nonce}_{'0' * 64}")
    response = forged.get(runner.path("spec"))
    assert response.status_code == 401
    assert response.json()["error"]["type"] == "unauthenticated"


@pytest.mark.usefixtures("shared_host")
def test_a_token_of_another_job_is_404(org, other_org):
    mine, theirs = _allocated(org), _allocated(other_org)
    response = mine.get("spec", job_id=theirs.job.public_id)
    assert response.status_code == 404
    assert (
        mine.post("logs", {"lines": [_line(1, "x")]}, job_id=theirs.job.public_id).status_code
        == 404
    )
    assert not LogLine.objects.filter(job=theirs.job, source="user").exists()


def _batch(seqs, **extra) -> dict:
    return {"lines": [_line(seq, f"line {seq}") for seq in seqs], **extra}


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_a_batch_that_follows_one_in_flight_is_stored_after_it(org):
    """The runner sends two batches at once, the second marked `follows`: even when the
    second arrives first, its lines get ids after the first's, so ids keep seq order."""
    runner = _allocated(org)
    answers = {}

    def send_second():
        answers["second"] = runner.post("logs", _batch(range(6, 11), follows=5))

    second = threading.Thread(target=send_second)
    second.start()
    time.sleep(0.2)  # the second is waiting for seq 5
    assert "second" not in answers
    assert runner.post("logs", _batch(range(1, 6))).json() == {
        "accepted": 5,
        "duplicates": 0,
        "order": "continue",
    }
    second.join(10)
    assert answers["second"].json() == {"accepted": 5, "duplicates": 0, "order": "continue"}
    by_id = LogLine.objects.filter(job=runner.job, seq__isnull=False).order_by("id")
    assert list(by_id.values_list("seq", flat=True)) == list(range(1, 11))


def test_a_batch_whose_predecessor_never_comes_is_stored_after_a_bounded_wait(org, monkeypatch):
    monkeypatch.setattr(ingestion, "FOLLOW_WAIT_S", 0.1)
    runner = _allocated(org)
    started = time.monotonic()
    answer = runner.post("logs", _batch(range(6, 8), follows=5))
    assert answer.json() == {"accepted": 2, "duplicates": 0, "order": "continue"}
    assert time.monotonic() - started < 2


@pytest.mark.parametrize("follows", [0, -1, "5", 2.5, True, 2**31])
def test_a_bad_follows_is_a_400_and_stores_nothing(org, follows):
    runner = _allocated(org)
    answer = runner.post("logs", _batch([1], follows=follows))
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == "follows"
    assert not LogLine.objects.filter(job=runner.job, seq__isnull=False).exists()


def test_started_moves_the_job_to_running_and_heartbeats_carry_orders(org):
    runner = _allocated(org)
    assert runner.post("started", {"pid": 123}).json() == {"order": "continue"}
    assert Job.objects.get(pk=runner.job.pk).state == JobState.RUNNING
    assert runner.post("heartbeat", {"last_seq": 0}).json() == {"order": "continue"}
    services.job_terminate(job=runner.job)
    assert runner.post("heartbeat", {"last_seq": 0}).json() == {"order": "terminate"}


def test_a_heartbeat_is_one_update_and_its_answer_carries_the_order(org):
    runner = _allocated(org)
    runner.post("started", {"pid": 1})
    Attempt.objects.filter(pk=runner.attempt.pk).update(last_heartbeat_at=None)

    with CaptureQueriesContext(connection) as queries:
        answer = runner.post("heartbeat", {"last_seq": 0})

    assert answer.json() == {"order": "continue"}
    # The token's attempt and job (authentication), then the beat: no re-read.
    assert [query["sql"].split()[0] for query in queries] == ["SELECT", "UPDATE"]
    assert Attempt.objects.get(pk=runner.attempt.pk).last_heartbeat_at is not None
    Attempt.objects.filter(pk=runner.attempt.pk).update(preempt_requested_at=timezone.now())
    assert runner.post("heartbeat").json() == {"order": "checkpoint_and_exit"}
    services.job_terminate(job=runner.job)
    assert runner.post("heartbeat").json() == {"order": "terminate"}


def test_a_heartbeat_of_an_ended_or_superseded_attempt_is_409_and_records_nothing(org):
    runner = _allocated(org)
    runner.post("started", {"pid": 1})
    attempt = Attempt.objects.get(pk=runner.attempt.pk)
    attempts.end_attempt(attempt, reason="reclaimed")
    ended_beat = Attempt.objects.get(pk=attempt.pk).last_heartbeat_at

    response = runner.post("heartbeat")

    assert response.status_code == 409
    assert response.json()["error"]["type"] == "attempt_superseded"
    assert Attempt.objects.get(pk=attempt.pk).last_heartbeat_at == ended_beat
    # Not ended, but no longer the job's current attempt (a later one was made): the same.
    Attempt.objects.filter(pk=attempt.pk).update(ended_at=None)
    Job.objects.filter(pk=runner.job.pk).update(attempt_count=2)
    with pytest.raises(attempts.AttemptSuperseded):
        reports.runner_heartbeat(attempt.pk)
    assert Attempt.objects.get(pk=attempt.pk).last_heartbeat_at == ended_beat


def test_a_retried_batch_is_stored_once_and_counts_stay_exact(org):
    runner = _allocated(org)
    batch = {
        "lines": [
            _line(1, "one"),
            _line(2, "two", stream="stderr"),
            _line(3, "boot", source="system"),
        ]
    }
    assert runner.post("logs", batch).json() == {
        "accepted": 3,
        "duplicates": 0,
        "order": "continue",
    }
    assert runner.post("logs", batch).json() == {
        "accepted": 0,
        "duplicates": 3,
        "order": "continue",
    }
    overlap = {"lines": [_line(3, "boot", source="system"), _line(4, "four")]}
    assert runner.post("logs", overlap).json() == {
        "accepted": 1,
        "duplicates": 1,
        "order": "continue",
    }
    job = Job.objects.get(pk=runner.job.pk)
    assert (job.user_log_lines, job.system_log_lines) == (3, 2)  # + the allocation line
    stored = list(
        LogLine.objects.filter(job=job, seq__isnull=False)
        .order_by("seq")
        .values_list("seq", "message", "stream")
    )
    assert stored == [
        (1, "one", "stdout"),
        (2, "two", "stderr"),
        (3, "boot", "stdout"),
        (4, "four", "stdout"),
    ]


@pytest.mark.parametrize(
    ("line", "param"),
    [
        ({"seq": 0}, "lines[0].seq"),
        ({"seq": True}, "lines[0].seq"),
        ({"ts": "yesterday"}, "lines[0].ts"),
        ({"ts": "2026-01-01T00:00:00"}, "lines[0].ts"),
        ({"source": "kernel"}, "lines[0].source"),
        ({"stream": "stdin"}, "lines[0].stream"),
        ({"message": 5}, "lines[0].message"),
    ],
)
def test_a_bad_line_is_400_naming_it_and_stores_nothing(org, line, param):
    runner = _allocated(org)
    response = runner.post("logs", {"lines": [{**_line(1, "x"), **line}]})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == param
    assert not LogLine.objects.filter(job=runner.job, source="user").exists()


def test_ingestion_masks_secrets_the_runner_did_not(org):
    secret = secret_services.secret_create(organization=org, name="k", data={"T": "hunter2-secret"})
    runner = _allocated(
        org,
        container={
            "image": "img",
            "command": ["true"],
            "secret_env": {"TOKEN": {"secret_id": secret.public_id, "key": "T"}},
        },
    )
    runner.post(
        "logs",
        {"lines": [_line(1, "token is hunter2-secret!"), _line(2, "b64 aHVudGVyMi1zZWNyZXQ=")]},
    )
    plain, encoded = LogLine.objects.filter(job=runner.job, source="user").order_by("seq")
    assert plain.message == "token is ***!"
    # Every base64 character that depends only on the secret is masked; the last one also
    # carries padding bits and may remain.
    assert encoded.message.startswith("b64 ***")
    assert "aHVudGVyMi1zZWNyZXQ" not in encoded.message


def test_metric_lines_become_metric_points(org):
    runner = _allocated(org)
    runner.post(
        "logs",
        {
            "lines": [
                _line(1, "{'loss': 2.5, 'learning_rate': 0.0002, 'epoch': 0.1}"),
                _line(2, "iter 100: loss 2.4712, time 380.12ms"),
                _line(3, '{"step": 7, "loss": 1.5, "tokens_per_s": 900}'),
                _line(4, "{'loss': 9.9}", source="system"),
                _line(5, "just text"),
            ]
        },
    )
    points = list(
        MetricPoint.objects.filter(job=runner.job)
        .order_by("id")
        .values_list("step", "loss", "learning_rate", "extra")
    )
    assert points == [
        (1, 2.5, 0.0002, {}),
        (100, 2.4712, None, {"time_ms": 380.12}),
        (7, 1.5, None, {"tokens_per_s": 900.0}),
    ]


def test_exit_finishes_the_job_by_its_code(org):
    runner = _allocated(org)
    runner.post("started", {"pid": 1})
    runner.post("logs", {"lines": [_line(1, "bad things", stream="stderr")]})
    assert runner.post("exit", {"exit_code": 2, "last_seq": 1}).json() == {"ok": True}
    assert Job.objects.get(pk=runner.job.pk).state == JobState.FINALIZING
    supervision.finalize(runner.job.pk)
    job = Job.objects.get(pk=runner.job.pk)
    assert (job.state, job.reason, job.exit_code) == (JobState.FAILED, "exit_code_2", 2)
    assert job.error_message == "bad things"
    attempt = Attempt.objects.get(pk=runner.attempt.pk)
    assert (attempt.exit_code, attempt.end_reason) == (2, "exit_code_2")
    assert attempt.ended_at is not None
    assert runner.post("exit", {"exit_code": 2, "last_seq": 1}).status_code == 200


def test_an_old_attempt_is_superseded(org):
    runner = _allocated(org)
    runner.post("started", {"pid": 1})
    job = services.job_transition(job_id=runner.job.pk, to=JobState.PREEMPTED)
    attempts.end_attempt(Attempt.objects.get(pk=runner.attempt.pk), reason="reclaimed")
    services.job_transition(job_id=job.pk, to=JobState.REQUESTED)
    dispatch.allocate(job.pk)
    for endpoint in ("spec", "heartbeat", "started"):
        call = runner.get if endpoint == "spec" else runner.post
        response = call(endpoint)
        assert response.status_code == 409, endpoint
        assert response.json()["error"]["type"] == "attempt_superseded"
    # Late lines of the old attempt are still history worth keeping.
    assert runner.post("logs", {"lines": [_line(1, "late")]}).json()["accepted"] == 1


def test_a_stored_log_batch_counts_as_a_heartbeat_at_most_once_per_interval(org, settings):
    """Under load a runner's heartbeats may wait behind its batches: a batch it could send is
    proof of life all the same, so a busy control plane never takes it for silent."""
    runner = _allocated(org)
    assert runner.post("started").status_code == 200
    long_ago = timezone.now() - timedelta(seconds=settings.HEARTBEAT_TIMEOUT_S - 1)
    Attempt.objects.filter(pk=runner.attempt.pk).update(last_heartbeat_at=long_ago)

    assert runner.post("logs", {"lines": [_line(1, "step 1")]}).status_code == 200
    beat = Attempt.objects.get(pk=runner.attempt.pk).last_heartbeat_at
    assert timezone.now() - beat < timedelta(seconds=5)

    with CaptureQueriesContext(connection) as queries:
        assert runner.post("logs", {"lines": [_line(2, "step 2")]}).status_code == 200
    assert not [q for q in queries.captured_queries if 'UPDATE "jobs_attempt"' in q["sql"]]
    assert Attempt.objects.get(pk=runner.attempt.pk).last_heartbeat_at == beat
