"""The runner's calls that carry sessions (accept, down, up), as the runner makes them, with
the control plane's end of the session (apps.jobs.shell) on the same Redis."""

from __future__ import annotations

import json
import threading

import pytest
from asgiref.sync import async_to_sync

from apps.jobs.execution.tokens import token_for
from apps.jobs.shell import pipes
from apps.jobs.shell.bridge import ShellChannel, ShellUnavailable, open_session, shell_request
from runner import protocol
from tests.jobs.runner_api.test_runner_api import _allocated

pytestmark = pytest.mark.django_db


def _session(runner, sid: str = "a" * 32) -> ShellChannel:
    meta = pipes.SessionMeta(runner.job.public_id, runner.attempt.pk, runner.attempt.token_nonce)
    async_to_sync(pipes.create)(sid, meta, {**shell_request(command="id"), "sid": sid})
    return ShellChannel(sid, runner.attempt.pk)


def _down(runner, sid: str, wait: float = 0, token: str | None = None):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
    return runner.client.get(runner.path(f"ssh/{sid}/down") + f"?wait={wait}", **headers)


def _up(runner, sid: str, body: bytes):
    return runner.client.post(
        runner.path(f"ssh/{sid}/up"), body, content_type="application/octet-stream"
    )


def test_the_runner_takes_a_waiting_session_and_frames_go_both_ways(org):
    runner = _allocated(org)
    channel = _session(runner)
    taken = runner.get("ssh/accept?wait=1")
    assert taken.status_code == 200
    assert [(s["sid"], s["command"]) for s in taken.json()["sessions"]] == [("a" * 32, "id")]
    assert runner.get("ssh/accept?wait=0").json() == {"sessions": []}  # taken once

    async_to_sync(channel.send)(protocol.FRAME_STDIN, b"typed")
    answer = _down(runner, channel.sid, wait=1)
    assert answer.status_code == 200 and answer["Content-Type"] == "application/octet-stream"
    assert protocol.decode_frames(answer.content) == [(protocol.FRAME_STDIN, b"typed")]

    frames = protocol.encode_frame(protocol.FRAME_OPENED, b'{"ok": true}') + protocol.encode_frame(
        protocol.FRAME_STDOUT, b"uid=1000"
    )
    assert _up(runner, channel.sid, frames).json() == {"backlog": 2}
    assert async_to_sync(channel.receive)(1) == [
        (protocol.FRAME_OPENED, b'{"ok": true}'),
        (protocol.FRAME_STDOUT, b"uid=1000"),
    ]


def test_another_attempts_token_a_broken_frame_and_an_unknown_session_are_refused(org):
    runner = _allocated(org)
    other = _allocated(org)
    channel = _session(runner)
    assert _down(runner, channel.sid, token=token_for(other.attempt.token_nonce)).status_code == 404
    assert other.get("ssh/accept?wait=0").json() == {"sessions": []}  # not its session
    assert _down(runner, "b" * 32).json()["error"]["type"] == protocol.ERROR_SESSION_NOT_FOUND
    broken = _up(runner, channel.sid, b"o\x00\x00\x00\x09cut")
    assert broken.status_code == 400 and broken.json()["error"]["type"] == "invalid_request"
    unsigned = runner.client.get(
        runner.path("ssh/accept"), HTTP_AUTHORIZATION="Bearer tyr_forged_token"
    )
    assert unsigned.status_code == 401


@pytest.mark.django_db(transaction=True, serialized_rollback=True)  # the opener's thread
def test_the_heartbeat_answer_carries_the_hint_while_a_session_is_wanted(org):
    runner = _allocated(org)
    assert protocol.SHELL_ANSWER_KEY not in runner.post("heartbeat", {"last_seq": 0}).json()
    found: dict = {}

    def opener() -> None:
        try:
            async_to_sync(open_session)(
                job_id=runner.job.public_id,
                attempt_id=runner.attempt.pk,
                nonce=runner.attempt.token_nonce,
                request=shell_request(command="no-such-command"),
                timeout_s=10,
            )
        except ShellUnavailable as exc:
            found["refused"] = str(exc)

    thread = threading.Thread(target=opener)
    thread.start()
    sessions = runner.get("ssh/accept?wait=5").json()["sessions"]
    assert runner.post("heartbeat", {"last_seq": 0}).json()[protocol.SHELL_ANSWER_KEY] is True
    refusal = json.dumps({"error": "no-such-command: not found"}).encode()
    _up(runner, sessions[0]["sid"], protocol.encode_frame(protocol.FRAME_OPENED, refusal))
    thread.join(timeout=15)
    assert found == {"refused": "no-such-command: not found"}
    # The opener closed its side: the runner's next call hears the close.
    closing = protocol.decode_frames(_down(runner, sessions[0]["sid"]).content)
    assert closing[0][0] == protocol.FRAME_CLOSE


def test_a_session_nobody_takes_is_given_up_with_a_reason(org, settings):
    runner = _allocated(org)
    with pytest.raises(ShellUnavailable, match=r"did not open the session within 0\.5 s"):
        async_to_sync(open_session)(
            job_id=runner.job.public_id,
            attempt_id=runner.attempt.pk,
            nonce=runner.attempt.token_nonce,
            request=shell_request(),
            timeout_s=0.5,
        )
    assert runner.get("ssh/accept?wait=0").json() == {"sessions": []}  # withdrawn
