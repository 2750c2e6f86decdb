"""`POST /api/v1/runner/relay`: many attempts' log batches and heartbeats in one request,
each entry authenticated by its own token and answered exactly as the same call alone would
be. Through the real endpoint and real PostgreSQL."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from django.test import Client
from django.utils import timezone

from apps.jobs import services
from apps.jobs.execution import reports, supervision
from apps.jobs.execution.tokens import token_for
from apps.jobs.models import Attempt, Job, LogLine, MetricPoint
from apps.jobs.runner_api.auth import TOKEN_GRACE_AFTER_END_S
from apps.jobs.states import JobState
from apps.jobs.telemetry import ingestion
from runner import protocol
from tests.jobs.helpers import running, submit_on

pytestmark = pytest.mark.django_db

RELAY = "/api/v1/runner/relay"


@pytest.fixture(autouse=True)
def room(slots):
    """An offer with room for every attempt a test starts."""
    slots(10)
    return slots


def _live_attempt(org, slots) -> Attempt:
    attempt = running(submit_on(org, slots))
    return Attempt.objects.select_related("job").get(pk=attempt.pk)


@pytest.fixture
def attempts(org, room) -> list[Attempt]:
    """Three live attempts (the local provider runs one organization's work at a time)."""
    return [_live_attempt(org, room) for _ in range(3)]


def _lines(messages: list[str], first_seq: int = 1) -> list[dict]:
    now = datetime.now(UTC).isoformat()
    return [
        {"seq": seq, "ts": now, "source": "user", "stream": "stdout", "message": message}
        for seq, message in enumerate(messages, start=first_seq)
    ]


def _logs(attempt: Attempt, messages: list[str], first_seq: int = 1, **body) -> dict:
    return {
        "job_id": attempt.job.public_id,
        "token": token_for(attempt.token_nonce),
        "call": "logs",
        "body": {"lines": _lines(messages, first_seq), **body},
    }


def _beat(attempt: Attempt) -> dict:
    return {
        "job_id": attempt.job.public_id,
        "token": token_for(attempt.token_nonce),
        "call": "heartbeat",
        "body": {"last_seq": 0},
    }


def _relay(entries: list, **headers):
    return Client().post(RELAY, {"entries": entries}, content_type="application/json", **headers)


def _results(entries: list) -> list[dict]:
    response = _relay(entries)
    assert response.status_code == 200, response.content
    results = response.json()["results"]
    assert len(results) == len(entries)
    return results


def _stored(attempt: Attempt) -> list[str]:
    rows = LogLine.objects.filter(job_id=attempt.job_id, source="user").order_by("id")
    return list(rows.values_list("message", flat=True))


def test_every_entry_is_stored_and_answered_as_its_own_call_would_be(attempts):
    first, second, third = attempts
    Attempt.objects.filter(pk=third.pk).update(last_heartbeat_at=None)

    results = _results(
        [
            _logs(first, ["a1", "a2"]),
            _logs(second, ["b1"]),
            _beat(third),
            _logs(first, ["a3"], first_seq=3, follows=2),
        ]
    )

    continuing = {"accepted": 1, "duplicates": 0, "order": "continue"}
    assert results == [
        {"status": 200, "body": {**continuing, "accepted": 2}},
        {"status": 200, "body": continuing},
        {"status": 200, "body": {"order": "continue"}},
        {"status": 200, "body": continuing},
    ]
    assert _stored(first) == ["a1", "a2", "a3"]
    assert _stored(second) == ["b1"]
    assert Job.objects.get(pk=first.job_id).user_log_lines == 3
    assert Attempt.objects.get(pk=third.pk).last_heartbeat_at is not None


def test_one_entrys_refusal_is_its_own_and_the_others_are_stored(attempts, org, room):
    first, second, third = attempts
    ended = _live_attempt(org, room)
    reports.runner_exited(ended.pk, 0)
    supervision.finalize(ended.job_id)
    entries = [
        _logs(first, ["kept"]),
        {**_logs(second, ["forged"]), "token": "tyr_abc_0000"},
        {**_logs(second, ["wrong job"]), "job_id": first.job.public_id},
        {**_logs(third, ["bad line"]), "body": {"lines": [{"seq": 0}]}},
        {"job_id": third.job.public_id, "token": token_for(third.token_nonce), "call": "exit"},
        "not an object",
        _beat(ended),
        _logs(third, ["also kept"]),
    ]

    results = _results(entries)

    assert [result["status"] for result in results] == [200, 401, 404, 400, 400, 400, 409, 200]
    types = [result["body"].get("error", {}).get("type") for result in results]
    assert types == [
        None,
        "unauthenticated",
        "not_found",
        "invalid_request",
        "invalid_request",
        "invalid_request",
        protocol.ERROR_ATTEMPT_SUPERSEDED,
        None,
    ]
    assert results[3]["body"]["error"]["param"] == "lines[0].seq"
    assert results[4]["body"]["error"]["param"] == "entries[4].call"
    assert results[5]["body"]["error"]["param"] == "entries[5]"
    assert _stored(first) == ["kept"]
    assert _stored(second) == []
    assert _stored(third) == ["also kept"]


def test_a_batch_sent_again_in_a_bundle_is_stored_once(attempts):
    first, second, _ = attempts
    assert _results([_logs(first, ["one", "two"])])[0]["body"]["accepted"] == 2

    results = _results([_logs(second, ["new"]), _logs(first, ["one", "two", "three"])])

    assert [result["body"]["accepted"] for result in results] == [1, 1]
    assert [result["body"]["duplicates"] for result in results] == [0, 2]
    assert _stored(first) == ["one", "two", "three"]
    assert _stored(second) == ["new"]
    assert Job.objects.get(pk=first.job_id).user_log_lines == 3


def test_the_answer_carries_each_runners_order(attempts):
    first, second, third = attempts
    services.job_transition(job_id=second.job_id, to=JobState.TERMINATING)
    Attempt.objects.filter(pk=third.pk).update(preempt_requested_at=timezone.now())

    results = _results([_beat(first), _logs(second, ["x"]), _beat(third)])

    assert [result["body"]["order"] for result in results] == [
        protocol.ORDER_CONTINUE,
        protocol.ORDER_TERMINATE,
        protocol.ORDER_CHECKPOINT_AND_EXIT,
    ]


def test_a_token_past_its_grace_opens_nothing_in_a_bundle(attempts):
    first, second, _ = attempts
    reports.runner_exited(first.pk, 0)
    Attempt.objects.filter(pk=first.pk).update(
        ended_at=timezone.now() - timedelta(seconds=TOKEN_GRACE_AFTER_END_S + 1)
    )

    results = _results([_logs(first, ["late"]), _logs(second, ["fine"])])

    assert [result["status"] for result in results] == [401, 200]
    assert _stored(first) == []


def test_a_heartbeat_lane_bundle_records_heartbeats_and_refuses_anything_else(attempts):
    first, second, _ = attempts
    Attempt.objects.filter(pk__in=[first.pk, second.pk]).update(last_heartbeat_at=None)
    entries = [_beat(first), _logs(second, ["not here"]), _beat(second)]

    response = Client().post(
        f"{RELAY}?calls=heartbeat", {"entries": entries}, content_type="application/json"
    )

    assert response.status_code == 200
    results = response.json()["results"]
    assert [result["status"] for result in results] == [200, 400, 200]
    assert results[1]["body"]["error"]["type"] == "invalid_request"
    assert results[1]["body"]["error"]["param"] == "entries[1].call"
    assert "heartbeat" in results[1]["body"]["error"]["message"]
    assert _stored(second) == []
    beats = Attempt.objects.filter(pk__in=[first.pk, second.pk], last_heartbeat_at__isnull=False)
    assert beats.count() == 2


def test_a_bundle_for_calls_the_relay_protocol_has_no_lane_for_is_refused(attempts):
    response = Client().post(
        f"{RELAY}?calls=logs",
        {"entries": [_logs(attempts[0], ["x"])]},
        content_type="application/json",
    )

    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request"
    assert response.json()["error"]["param"] == "calls"
    assert _stored(attempts[0]) == []


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ([], "entries"),
        ({"entries": {}}, "entries"),
        ({"entries": [{}] * (protocol.RELAY_MAX_ENTRIES + 1)}, "entries"),
    ],
)
def test_a_bundle_that_is_not_a_list_of_entries_is_refused(body, param):
    response = Client().post(RELAY, json.dumps(body), content_type="application/json")

    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request"
    assert response.json()["error"]["param"] == param


def test_a_bundle_that_is_not_json_or_of_another_protocol_is_refused(attempts):
    not_json = Client().post(RELAY, b"{nope", content_type="application/json")
    newer = _relay([_logs(attempts[0], ["x"])], HTTP_X_TRAINYARD_PROTOCOL="99")
    read = Client().get(RELAY)

    assert not_json.status_code == 400
    assert not_json.json()["error"]["type"] == "invalid_request"
    assert newer.status_code == 400
    assert newer.json()["error"]["type"] == protocol.ERROR_UNSUPPORTED_PROTOCOL
    assert read.status_code == 405
    assert _stored(attempts[0]) == []


def test_metric_lines_in_a_bundle_are_parsed_and_every_write_takes_a_live_sequence(attempts):
    first, second, _ = attempts
    before = {
        job.pk: job.live_seq for job in Job.objects.filter(pk__in=[first.job_id, second.job_id])
    }

    results = _results(
        [
            _logs(first, ["plain"]),
            _logs(second, ["{'loss': 2.5, 'step': 1}"]),
            _logs(first, ["plain again"], first_seq=2),
        ]
    )

    assert {result["status"] for result in results} == {200}
    assert list(MetricPoint.objects.filter(job_id=second.job_id).values_list("step", "loss")) == [
        (1, 2.5)
    ]
    after = {
        job.pk: job.live_seq for job in Job.objects.filter(pk__in=[first.job_id, second.job_id])
    }
    assert after == {
        first.job_id: before[first.job_id] + 2,
        second.job_id: before[second.job_id] + 1,
    }
    assert Job.objects.get(pk=first.job_id).user_log_lines == 2


def test_a_batch_that_cannot_be_stored_for_a_bug_is_a_500_for_it_alone(attempts, monkeypatch):
    first, second, _ = attempts
    real_masker = ingestion.secret_masker

    def masker(attempt, job):  # a fault in one job's batches only (an injected bug)
        if job.pk == first.job_id:
            raise RuntimeError("injected")
        return real_masker(attempt, job)

    monkeypatch.setattr(ingestion, "secret_masker", masker)

    results = _results([_logs(first, ["doomed"]), _logs(second, ["kept"])])

    assert [result["status"] for result in results] == [500, 200]
    assert results[0]["body"]["error"]["type"] == "internal_error"
    assert _stored(first) == []
    assert _stored(second) == ["kept"]
