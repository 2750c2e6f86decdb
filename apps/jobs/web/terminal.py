"""The job page's terminal: `ws/jobs/<job_id>/terminal/?cols=C&rows=R`, a shell in the job's
running workload with a PTY, carried by the job's runner over its own channel like the SSH
gateway's sessions (apps.jobs.shell.bridge).

Who: a signed-in member of the job's organization with the role member, admin or owner.
A viewer is closed with 4403 and nothing is opened; a job of another organization is the
same as one that does not exist, 4404; not signed in 4401; too many sockets 4429. The
membership is checked again every `WS_REAUTH_INTERVAL_S` while the session lasts.

The socket's messages:

- browser → server: binary frames are keystrokes (the shell's stdin, as they are); text
  frames are JSON control messages: `{"type": "resize", "cols": C, "rows": R}` (the
  terminal was resized) or `{"type": "input", "data": "..."}` (keystrokes as text, sent
  UTF-8 encoded). Anything else is ignored.
- server → browser: binary frames are the terminal's output; text frames are JSON status
  messages: `{"type": "status", "state": "connecting"}` once the socket is accepted,
  `{"type": "status", "state": "connected"}` once the runner opened the shell, and a last
  `{"type": "closed", "reason": "..."}` (why it ended, in words for the person: "the shell
  exited with status 0", "job job_x was terminated") right before the server closes the
  socket with 1000.

The session ends when the shell exits, the runner closes it, the job's attempt ends (checked
every WATCH_INTERVAL_S, as the gateway does), it stays idle past
SSH_SESSION_IDLE_TIMEOUT_S, carries more than SSH_SESSION_MAX_BYTES, or the browser goes
away. Each session is two events on the job's timeline (opened; closed with how long, the
bytes each way and why), `via` "terminal", `who` the user's email (or username)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings

from apps.accounts.models import Membership, Role
from apps.core.live import (
    CLOSE_FORBIDDEN,
    CLOSE_TOO_MANY,
    CLOSE_UNAUTHENTICATED,
    reauth_interval_s,
    release_socket_slot,
    take_socket_slot,
    touch_socket_slot,
)
from apps.jobs.models import Job
from apps.jobs.shell import access
from apps.jobs.shell.bridge import (
    BACKLOG_PAUSE,
    ShellChannel,
    ShellUnavailable,
    open_session,
    shell_request,
)
from runner import protocol

log = logging.getLogger("trainyard.terminal")

CLOSE_NOT_FOUND = 4404
CLOSE_NORMAL = 1000
WATCH_INTERVAL_S = 2.0
RECEIVE_WAIT_S = 15.0
DEFAULT_SIZE = (80, 24)
MAX_COLS, MAX_ROWS = 1000, 500
KIND = "a terminal"
VIA = "terminal"
TERM = "xterm-256color"


def _size(cols, rows) -> tuple[int, int]:
    """A terminal size from the browser, within bounds (the default for nonsense)."""
    try:
        cols, rows = int(cols), int(rows)
    except (TypeError, ValueError):
        return DEFAULT_SIZE
    return max(2, min(cols, MAX_COLS)), max(1, min(rows, MAX_ROWS))


def exit_reason(status: dict) -> str:
    """How the shell ended, from a FRAME_EXIT's body."""
    if "signal" in status:
        return f"the shell was killed by signal {status['signal']}"
    return f"the shell exited with status {int(status.get('status', 0))}"


def _role_on_job(user, job_id: str) -> tuple[int, str, str] | None:
    """(the job's pk, the user's role in its organization, who) or None: no such job for
    this user (another organization's job included)."""
    job = Job.objects.filter(public_id=job_id).only("pk", "organization_id").first()
    if job is None:
        return None
    membership = (
        Membership.objects.filter(
            user=user, user__is_active=True, organization_id=job.organization_id
        )
        .only("role")
        .first()
    )
    if membership is None:
        return None
    return job.pk, membership.role, user.email or user.get_username()


class TerminalConsumer(AsyncWebsocketConsumer):
    grant: access.Grant | None = None
    channel: ShellChannel | None = None
    attempt_id: int | None = None
    slot_user_id: int | None = None
    ended: str = ""

    # -- the browser's side --------------------------------------------------------------

    async def connect(self) -> None:
        user = self.scope.get("user")
        job_id = self.scope["url_route"]["kwargs"]["job_id"]
        if user is None or not user.is_authenticated:
            await self._refuse(CLOSE_UNAUTHENTICATED)
            return
        found = await database_sync_to_async(_role_on_job)(user, job_id)
        if found is None:
            await self._refuse(CLOSE_NOT_FOUND)
            return
        job_pk, role, who = found
        if role not in (Role.MEMBER, Role.ADMIN, Role.OWNER):
            await self._refuse(CLOSE_FORBIDDEN)
            return
        if not await take_socket_slot(user.pk, self.channel_name):
            await self._refuse(CLOSE_TOO_MANY)
            return
        self.slot_user_id = user.pk
        self.grant = access.Grant(job_pk, job_id, who, "")
        self.started = self.last_active = self.checked_at = time.monotonic()
        self.bytes_in = self.bytes_out = 0
        self.exited = ""
        self.window: tuple[int, int] | None = None  # a resize that came before the shell
        self.early: list[bytes] = []  # keystrokes typed before the shell opened
        self.down: asyncio.Queue[tuple[bytes, bytes] | None] = asyncio.Queue()
        self.tasks: list[asyncio.Task] = []
        await self.accept()
        await self._status("connecting")
        query = parse_qs(self.scope.get("query_string", b"").decode(errors="replace"))
        cols, rows = _size(query.get("cols", [None])[0], query.get("rows", [None])[0])
        self.opener = asyncio.ensure_future(self._open(cols, rows))

    async def _refuse(self, code: int) -> None:
        """Refused right after the handshake, so the page can tell a refusal from a drop."""
        await self.accept()
        await self.close(code=code)

    async def receive(self, text_data=None, bytes_data=None) -> None:
        if self.grant is None or self.ended:
            return
        if bytes_data is not None:
            self._typed(bytes_data)
            return
        try:
            message = json.loads(text_data or "")
        except ValueError:
            return
        if not isinstance(message, dict):
            return
        if message.get("type") == "input" and isinstance(message.get("data"), str):
            self._typed(message["data"].encode())
        elif message.get("type") == "resize":
            cols, rows = _size(message.get("cols"), message.get("rows"))
            if self.channel is None:
                self.window = (cols, rows)
            else:
                body = json.dumps({"cols": cols, "rows": rows}).encode()
                self.down.put_nowait((protocol.FRAME_WINDOW, body))

    def _typed(self, data: bytes) -> None:
        if not data:
            return
        self.bytes_in += len(data)
        self.last_active = time.monotonic()
        if self.channel is None:
            self.early.append(data)
        else:
            self.down.put_nowait((protocol.FRAME_STDIN, data))

    async def disconnect(self, code: int) -> None:
        if self.grant is not None:
            await self.end("the browser disconnected", notify=False)
        user_id, self.slot_user_id = self.slot_user_id, None
        if user_id is not None:
            await release_socket_slot(user_id, self.channel_name)

    async def _status(self, state: str) -> None:
        await self.send(text_data=json.dumps({"type": "status", "state": state}))

    # -- the runner's side ---------------------------------------------------------------

    async def _open(self, cols: int, rows: int) -> None:
        assert self.grant is not None
        try:
            target = await database_sync_to_async(access.target)(self.grant)
            if target.attempt_id is None:
                raise ShellUnavailable(target.refusal)
            channel, first = await open_session(
                job_id=self.grant.job_id,
                attempt_id=target.attempt_id,
                nonce=target.nonce,
                request=shell_request(pty={"term": TERM, "cols": cols, "rows": rows}),
                timeout_s=settings.SSH_SESSION_OPEN_TIMEOUT_S,
            )
        except ShellUnavailable as exc:
            await self.end(str(exc))
            return
        except Exception:
            log.exception("opening a terminal into %s", self.grant.job_id)
            await self.end("the session could not be opened (the server's log says why)")
            return
        if self.ended:  # the browser went away while the runner was opening it
            with contextlib.suppress(Exception):
                await channel.close(self.ended)
            return
        self.channel, self.attempt_id = channel, target.attempt_id
        await database_sync_to_async(access.record_opened)(
            self.grant, sid=channel.sid, kind=KIND, via=VIA
        )
        if self.window is not None and self.window != (cols, rows):
            body = json.dumps({"cols": self.window[0], "rows": self.window[1]}).encode()
            self.down.put_nowait((protocol.FRAME_WINDOW, body))
        for data in self.early:
            self.down.put_nowait((protocol.FRAME_STDIN, data))
        self.early = []
        await self._status("connected")
        self.tasks = [
            asyncio.ensure_future(self._pump_down()),
            asyncio.ensure_future(self._pump_up(first)),
            asyncio.ensure_future(self._watch()),
        ]

    async def _pump_down(self) -> None:
        assert self.channel is not None
        try:
            while True:
                item = await self.down.get()
                if item is None:
                    return
                if await self.channel.send(*item) > BACKLOG_PAUSE:
                    await self.channel.drain(lambda: bool(self.ended))
        except Exception:  # Redis failed under it: end the session rather than hang it
            log.exception("terminal %s: carrying keystrokes", self.channel.sid)
            await self.end("the control plane lost the session's channel")

    async def _pump_up(self, first: list[tuple[bytes, bytes]]) -> None:
        assert self.channel is not None
        frames = first
        try:
            while not self.ended:
                for kind, payload in frames:
                    if kind in (protocol.FRAME_STDOUT, protocol.FRAME_STDERR):
                        self.bytes_out += len(payload)
                        self.last_active = time.monotonic()
                        try:
                            await self.send(bytes_data=payload)
                        except Exception:  # the browser is gone (its disconnect follows)
                            await self.end("the browser disconnected", notify=False)
                            return
                    elif kind == protocol.FRAME_EXIT:
                        self.exited = exit_reason(json.loads(payload or b"{}"))
                    elif kind == protocol.FRAME_CLOSED:
                        await self._runner_closed()
                        return
                if self.exited:  # whatever came with the exit is shown; nothing follows
                    await self._runner_closed()
                    return
                frames = await self.channel.receive(RECEIVE_WAIT_S)
        except ValueError as exc:
            log.warning("terminal %s: a broken frame from the runner: %s", self.channel.sid, exc)
            await self.end("the runner's side broke the protocol")
        except Exception:  # Redis failed under it: end the session rather than hang it
            log.exception("terminal %s: carrying the workload's output", self.channel.sid)
            await self.end("the control plane lost the session's channel")

    async def _runner_closed(self) -> None:
        """The runner ended the session: because the shell exited, or because the attempt is
        ending (then say that)."""
        ended = ""
        if self.attempt_id is not None:
            ended = await database_sync_to_async(access.attempt_live)(self.attempt_id)
        await self.end(ended or self.exited or "the job's runner closed the session")

    async def _watch(self) -> None:
        while not self.ended:
            await asyncio.sleep(WATCH_INTERVAL_S)
            why = await database_sync_to_async(access.attempt_live)(self.attempt_id)
            why = (
                why
                or access.over_bounds(self.bytes_in + self.bytes_out, self.last_active)
                or await self._revoked()
            )
            if why:
                await self.end(why)
                return

    async def _revoked(self) -> str:
        """Why the user may no longer hold the session ("" while they may), checked at most
        once per reauthorisation interval."""
        now = time.monotonic()
        if now - self.checked_at < reauth_interval_s():
            return ""
        self.checked_at = now
        found = await database_sync_to_async(_role_on_job)(self.scope["user"], self.grant.job_id)
        if found is None or found[1] not in (Role.MEMBER, Role.ADMIN, Role.OWNER):
            return "your access to the job was withdrawn"
        if self.slot_user_id is not None:
            await touch_socket_slot(self.slot_user_id, self.channel_name)
        return ""

    async def end(self, why: str, notify: bool = True) -> None:
        """Close the session once: the runner's side, the record on the job's timeline, and
        (`notify`) the browser, told why."""
        if self.ended:
            return
        self.ended = why
        self.down.put_nowait(None)
        channel = self.channel
        if channel is not None:
            with contextlib.suppress(Exception):
                await channel.close(why)
        if notify:
            with contextlib.suppress(Exception):
                await self.send(text_data=json.dumps({"type": "closed", "reason": why}))
                await self.close(code=CLOSE_NORMAL)
        for task in self.tasks:
            if task is not asyncio.current_task():
                task.cancel()
        if channel is not None:
            await database_sync_to_async(access.record_closed)(
                self.grant,
                sid=channel.sid,
                kind=KIND,
                duration_s=time.monotonic() - self.started,
                bytes_in=self.bytes_in,
                bytes_out=self.bytes_out,
                why=why,
            )
