"""The server's real answers, read with the runner's own code (`runner.protocol`,
`runner.spec`, `runner.client.classify`): the contract holds on both ends."""

from typing import get_type_hints

import pytest
from django.test import Client

from apps.jobs import services
from apps.jobs.execution import dispatch
from apps.jobs.execution.tokens import token_for
from apps.jobs.models import Job
from apps.jobs.states import JobState
from runner import protocol
from runner.client import Outcome, classify
from runner.spec import JobSpec
from tests.jobs.helpers import make_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def runner_client(org):
    job = make_job(org, container={"image": "img", "command": ["echo", "hi"], "env": {"A": "1"}})
    attempt = dispatch.allocate(job.pk)
    services.job_transition(job_id=job.pk, to=JobState.PROVISIONING)
    job = Job.objects.get(pk=job.pk)
    client = Client(
        HTTP_AUTHORIZATION=f"Bearer {token_for(attempt.token_nonce)}",
        headers={protocol.PROTOCOL_HEADER: str(protocol.PROTOCOL_VERSION)},
    )
    client.base = f"/api/v1/runner/jobs/{job.public_id}/"
    client.job = job
    return client


def test_the_spec_answer_is_exactly_the_shape_the_protocol_declares(runner_client):
    answer = runner_client.get(runner_client.base + "spec")

    assert answer.status_code == 200
    body = answer.json()
    assert set(body) == set(get_type_hints(protocol.SpecResponse))
    assert protocol.version_of_spec(body) == protocol.PROTOCOL_VERSION
    spec = JobSpec.from_json(body)
    assert spec.job_id == runner_client.job.public_id
    assert spec.command == ["echo", "hi"]
    assert spec.env[protocol.ENV_JOB_ID] == runner_client.job.public_id
    assert spec.env[protocol.ENV_ATTEMPT] == "1"
    assert spec.env["A"] == "1"


def test_started_heartbeat_and_exit_round_trip_with_the_protocols_orders(runner_client):
    started = runner_client.post(
        runner_client.base + "started", {"resumed_from_step": None}, "application/json"
    )
    heartbeat = runner_client.post(runner_client.base + "heartbeat", {}, "application/json")
    services.job_terminate(job=Job.objects.get(pk=runner_client.job.pk), reason="cancelled")
    told_to_stop = runner_client.post(runner_client.base + "heartbeat", {}, "application/json")
    exited = runner_client.post(
        runner_client.base + "exit", {"exit_code": protocol.EXIT_SIGTERM}, "application/json"
    )

    assert started.json() == {"order": protocol.Order.CONTINUE}
    assert heartbeat.json() == {"order": protocol.Order.CONTINUE}
    assert told_to_stop.json() == {"order": protocol.Order.TERMINATE}
    assert exited.status_code == 200
    assert all(
        classify(r.status_code, r.json()) is Outcome.OK
        for r in (started, heartbeat, told_to_stop, exited)
    )


def test_a_log_batchs_answer_carries_the_order_as_a_heartbeats_does(runner_client):
    def batch(seq: int):
        line = {"seq": seq, "ts": "2026-12-03T12:00:00Z", "source": "user", "stream": "stdout"}
        body = {"lines": [{**line, "message": f"line {seq}"}]}
        return runner_client.post(runner_client.base + "logs", body, "application/json")

    runner_client.post(runner_client.base + "started", {}, "application/json")
    first = batch(1)
    services.job_terminate(job=Job.objects.get(pk=runner_client.job.pk), reason="cancelled")
    second = batch(2)

    assert set(first.json()) == set(get_type_hints(protocol.LogsAnswer))
    assert first.json() == {"accepted": 1, "duplicates": 0, "order": protocol.Order.CONTINUE}
    assert second.json() == {"accepted": 1, "duplicates": 0, "order": protocol.Order.TERMINATE}


def test_a_runner_started_by_an_older_control_plane_sends_no_version_and_is_served(
    runner_client,
):
    older = Client(HTTP_AUTHORIZATION=runner_client.defaults["HTTP_AUTHORIZATION"])

    answer = older.get(runner_client.base + "spec")

    assert answer.status_code == 200
    assert answer.json()["job_id"] == runner_client.job.public_id


@pytest.mark.parametrize("sent", [str(protocol.PROTOCOL_VERSION + 1), "0", "two", ""])
def test_a_version_the_server_does_not_speak_is_refused_and_the_runner_stops(runner_client, sent):
    client = Client(
        HTTP_AUTHORIZATION=runner_client.defaults["HTTP_AUTHORIZATION"],
        headers={protocol.PROTOCOL_HEADER: sent},
    )

    answer = client.post(runner_client.base + "heartbeat", {}, "application/json")

    assert answer.status_code == 400
    assert answer.json()["error"]["type"] == protocol.ERROR_UNSUPPORTED_PROTOCOL
    assert classify(answer.status_code, answer.json()) is Outcome.FATAL
    job = Job.objects.get(pk=runner_client.job.pk)
    assert job.attempts.get().last_heartbeat_at is None  # nothing was recorded
