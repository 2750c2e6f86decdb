"""The log sender and the heartbeat on their own, against the peer over real sockets: what a
batch's answer is handed to, and what happens when handling it, or a heartbeat, fails."""

from __future__ import annotations

import time

import pytest

from runner.client import ControlClient
from runner.loops import Heartbeat, LogSender
from runner.spool import Spool
from tests.runner.peer import ControlPlane

JOB, TOKEN = "job_sender", "sender-token"


@pytest.fixture
def plane():
    control = ControlPlane(job_id=JOB, token=TOKEN, spec={})
    control.server.start()
    yield control
    control.server.stop()


def _send(plane, tmp_path, on_answer) -> Spool:
    spool = Spool(tmp_path / "spool")
    sender = LogSender(
        ControlClient(plane.url, JOB, TOKEN),
        spool,
        max_lines=10,
        max_interval_s=0.01,
        on_abort=lambda status, reason: pytest.fail(f"aborted: {reason}"),
        on_answer=on_answer,
    )
    sender.start()
    try:
        spool.append_messages(
            1, "2026-12-03T12:00:00Z", "user", "stdout", [f"l{n}" for n in range(35)]
        )
        sender.notify()
        assert sender.wait_shipped(35, timeout=10)
    finally:
        sender.stop()
    return spool


def test_every_batchs_answer_is_handed_over(plane, tmp_path):
    plane.batch_order = "continue"
    answers: list[dict] = []

    _send(plane, tmp_path, answers.append)

    assert len(answers) == len(plane.batches) >= 4  # 35 lines, at most 10 a batch
    assert all(answer["order"] == "continue" for answer in answers)


def test_a_failure_in_handling_an_answer_never_sends_a_stored_batch_again(plane, tmp_path):
    def broken(answer: dict) -> None:
        raise RuntimeError("a bug in the answer's handler")

    spool = _send(plane, tmp_path, broken)

    assert spool.acked_seq == 35
    assert sorted(plane.receipts) == list(range(1, 36))
    assert set(plane.receipts.values()) == {1}  # each line sent once


class BrokenHeartbeatClient(ControlClient):
    """The real client, whose heartbeat call fails as a bug would (not a retryable error)."""

    beats = 0

    def post_heartbeat(self, last_seq: int) -> dict:
        self.beats += 1
        raise ValueError("a bug in the heartbeat")


def test_a_heartbeat_that_fails_with_a_bug_is_tried_again_an_interval_later(plane):
    client = BrokenHeartbeatClient(plane.url, JOB, TOKEN)
    heartbeat = Heartbeat(
        client,
        pid=1,
        interval_s=0.1,
        last_seq=lambda: 0,
        on_order=lambda order: None,
        on_abort=lambda status, reason: pytest.fail(f"aborted: {reason}"),
    )
    heartbeat.start()
    time.sleep(0.55)  # the window the tries are counted in
    heartbeat.stop()

    assert plane.started  # `started` went through the real client
    assert 1 <= client.beats <= 10  # about one a tenth of a second, not a busy loop
