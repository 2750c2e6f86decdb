"""The control plane's end of a session into a running job, for the SSH gateway and the job
page's terminal alike: `open_session` asks the attempt's runner to open it and waits until
it did (or said why not); the ShellChannel then carries frames both ways
(runner.protocol, "shell sessions")."""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import Callable

from asgiref.sync import sync_to_async
from django.utils import timezone

from apps.jobs.models import Attempt
from apps.jobs.shell import pipes
from runner import protocol

OPENED_POLL_S = 1.0
# The client's bytes wait for the runner in Redis: past BACKLOG_PAUSE frames not yet taken,
# the sender stops reading its client until the runner is down to BACKLOG_RESUME.
BACKLOG_PAUSE = protocol.SHELL_UP_BACKLOG_MAX
BACKLOG_RESUME = 8
DRAIN_POLL_S = 0.05


class ShellUnavailable(Exception):
    """The session could not be opened; the message says why, for the person asking."""


class ShellChannel:
    """One open session. Frames the workload sent come from `receive`; `send` queues frames
    for it and answers how many the runner has not taken yet."""

    def __init__(self, sid: str, attempt_id: int) -> None:
        self.sid = sid
        self.attempt_id = attempt_id
        self.closed = False

    async def send(self, kind: bytes, payload: bytes = b"") -> int:
        step = protocol.SHELL_FRAME_MAX_BYTES
        chunks = [payload[at : at + step] for at in range(0, len(payload), step)] or [b""]
        frames = [protocol.encode_frame(kind, chunk) for chunk in chunks]
        return await pipes.push(self.sid, "down", frames)

    async def send_json(self, kind: bytes, body: dict) -> int:
        return await self.send(kind, json.dumps(body).encode())

    async def backlog(self) -> int:
        """Frames queued for the workload that its runner has not taken yet."""
        return await pipes.backlog(self.sid, "down")

    async def drain(self, stop: Callable[[], bool]) -> None:
        """Wait until the runner has taken all but BACKLOG_RESUME frames, or `stop()`."""
        while await self.backlog() > BACKLOG_RESUME and not stop():
            await asyncio.sleep(DRAIN_POLL_S)

    async def receive(self, wait_s: float) -> list[tuple[bytes, bytes]]:
        """The workload's frames, waiting up to `wait_s` for the first; [] when none came.
        Raises ValueError on a broken frame (the runner's side is then not to be trusted)."""
        return protocol.decode_frames(await pipes.take(self.sid, "up", wait_s))

    async def close(self, message: str = "") -> None:
        """End the session: the runner kills what is left of it."""
        if self.closed:
            return
        self.closed = True
        await self.send_json(protocol.FRAME_CLOSE, {"message": message})
        await pipes.close(self.sid)


def shell_request(
    *,
    kind: str = "session",
    command: str | None = None,
    subsystem: str | None = None,
    pty: dict | None = None,
    env: dict[str, str] | None = None,
    host: str | None = None,
    port: int | None = None,
) -> dict:
    """A ShellRequest without its sid (runner.protocol.ShellRequest)."""
    return {
        "kind": kind,
        "command": command,
        "subsystem": subsystem,
        "pty": pty,
        "env": env or {},
        "host": host,
        "port": port,
    }


def _mark_wanted(attempt_id: int) -> None:
    Attempt.objects.filter(pk=attempt_id).update(shell_wanted_at=timezone.now())


async def open_session(
    *, job_id: str, attempt_id: int, nonce: str, request: dict, timeout_s: float
) -> tuple[ShellChannel, list[tuple[bytes, bytes]]]:
    """Ask the attempt's runner for the session and wait for its answer. Returns the channel
    and any frames that came right after the opening one. Raises ShellUnavailable."""
    sid = secrets.token_hex(16)
    request = {**request, "sid": sid}
    meta = pipes.SessionMeta(job_id=job_id, attempt_id=attempt_id, nonce=nonce)
    await sync_to_async(_mark_wanted)(attempt_id)
    await pipes.create(sid, meta, request)
    channel = ShellChannel(sid, attempt_id)
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            await pipes.withdraw(attempt_id, request)
            await channel.close("not taken")
            raise ShellUnavailable(
                f"The job's runner did not open the session within {timeout_s:g} s "
                "(it may still be starting, or be too old to carry sessions)."
            )
        frames = await channel.receive(min(left, OPENED_POLL_S))
        if not frames:
            await asyncio.sleep(0)
            continue
        kind, payload = frames[0]
        if kind != protocol.FRAME_OPENED:
            await channel.close("protocol error")
            raise ShellUnavailable("The job's runner answered out of order.")
        answer = json.loads(payload or b"{}")
        if not answer.get("ok"):
            await channel.close("refused")
            raise ShellUnavailable(str(answer.get("error") or "The runner refused the session."))
        return channel, frames[1:]
