"""The log sender on its own, against the peer over real sockets: what a batch's answer is
handed to, and what happens when handling it fails."""

from __future__ import annotations

import pytest

from runner.client import ControlClient
from runner.loops import LogSender
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
