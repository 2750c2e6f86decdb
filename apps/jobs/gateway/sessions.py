"""One SSH channel carried to the workload: a session (shell, exec, sftp) or a direct TCP
connection (`ssh -L`). Each opens its ShellChannel through the job's runner and pumps bytes
both ways, counting them, until either end closes or the gateway ends it (`end`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from typing import Protocol

import asyncssh
from asgiref.sync import sync_to_async
from django.conf import settings

from apps.jobs.gateway import access
from apps.jobs.shell import access as shared_rules
from apps.jobs.shell.bridge import (
    BACKLOG_PAUSE,
    ShellChannel,
    ShellUnavailable,
    open_session,
    shell_request,
)
from runner import protocol

log = logging.getLogger("trainyard.gateway")

RECEIVE_WAIT_S = 15.0
CLIENT_ENV = ("LANG", "TERM")
EXIT_UNAVAILABLE = 255  # what OpenSSH's own client exits with when the far end fails


class GatewayConnection(Protocol):
    """What a carried session needs of its SSH connection (server.GatewayConnection)."""

    grant: access.Grant
    attempt_id: int | None
    carried: set[Carried]


class Carried:
    """What sessions and TCP connections share: the runner channel, counters, the pumps."""

    kind = "session"

    def __init__(self, owner: GatewayConnection) -> None:
        self.owner = owner
        self.channel: ShellChannel | None = None
        self.chan: asyncssh.SSHChannel | None = None
        self.started = time.monotonic()
        self.last_active = self.started
        self.bytes_in = 0  # client -> workload
        self.bytes_out = 0  # workload -> client
        self.ended = ""
        self.attempt_ended = ""  # what ended the attempt, when that ended the session
        self._down: asyncio.Queue[tuple[bytes, bytes] | None] = asyncio.Queue()
        self._tasks: list[asyncio.Task] = []
        self._background: set[asyncio.Task] = set()
        self._writable = asyncio.Event()
        self._writable.set()
        self.description = "a session"

    def spawn(self, coroutine) -> None:
        """Run `coroutine` on its own, keeping the task referenced until it is done."""
        task = asyncio.ensure_future(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # -- the client's side ---------------------------------------------------------------

    def queue_down(self, kind: bytes, payload: bytes = b"") -> None:
        if kind == protocol.FRAME_STDIN:
            self.bytes_in += len(payload)
            self.last_active = time.monotonic()
        self._down.put_nowait((kind, payload))

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    # -- the runner's side ---------------------------------------------------------------

    async def open(self, request: dict) -> list[tuple[bytes, bytes]]:
        target = await sync_to_async(access.target)(self.owner.grant)
        if target.attempt_id is None:
            raise ShellUnavailable(target.refusal)
        self.channel, first = await open_session(
            job_id=self.owner.grant.job_id,
            attempt_id=target.attempt_id,
            nonce=target.nonce,
            request=request,
            timeout_s=settings.SSH_SESSION_OPEN_TIMEOUT_S,
        )
        self.owner.attempt_id = target.attempt_id
        self.owner.carried.add(self)
        await sync_to_async(access.record_opened)(
            self.owner.grant, sid=self.channel.sid, kind=self.description, via="ssh"
        )
        return first

    def start_pumps(self, first: list[tuple[bytes, bytes]]) -> None:
        self._tasks = [
            asyncio.ensure_future(self._pump_down()),
            asyncio.ensure_future(self._pump_up(first)),
        ]

    async def _pump_down(self) -> None:
        assert self.channel is not None and self.chan is not None
        while True:
            item = await self._down.get()
            if item is None:
                return
            if await self.channel.send(*item) > BACKLOG_PAUSE:
                self.chan.pause_reading()
                await self.channel.drain(lambda: bool(self.ended))
                self.chan.resume_reading()

    async def _pump_up(self, first: list[tuple[bytes, bytes]]) -> None:
        assert self.channel is not None
        frames = first
        try:
            while not self.ended:
                for kind, payload in frames:
                    if await self.deliver(kind, payload):
                        await self.end("the workload's side closed", notify=False)
                        return
                frames = await self.channel.receive(RECEIVE_WAIT_S)
        except ValueError as exc:
            log.warning("session %s: a broken frame from the runner: %s", self.channel.sid, exc)
            await self.end("the runner's side broke the protocol")

    async def deliver(self, kind: bytes, payload: bytes) -> bool:
        """Hand one frame to the client; True when the session is over."""
        raise NotImplementedError

    async def write(self, payload: bytes, stderr: bool = False) -> None:
        assert self.chan is not None
        self.bytes_out += len(payload)
        self.last_active = time.monotonic()
        await self._writable.wait()
        if stderr:
            self.chan.write_stderr(payload)  # type: ignore[attr-defined]
        else:
            self.chan.write(payload)

    def over_bounds(self) -> str:
        """Why the gateway should end this session now ("" when it should not)."""
        return shared_rules.over_bounds(self.bytes_in + self.bytes_out, self.last_active)

    async def end(self, why: str, notify: bool = True) -> None:
        """Close the session once: tell the client why (`notify`), the runner to stop, and
        the job's timeline how it went."""
        if self.ended:
            return
        self.ended = why = self.attempt_ended or why
        self._down.put_nowait(None)
        if notify and self.chan is not None:
            self.tell(f"trainyard: closing the session: {why}")
        if self.channel is not None:
            with contextlib.suppress(Exception):
                await self.channel.close(why)
        if self.chan is not None:
            self.finish_channel()
        self.owner.carried.discard(self)
        if self.channel is not None:
            await sync_to_async(access.record_closed)(
                self.owner.grant,
                sid=self.channel.sid,
                kind=self.description,
                duration_s=time.monotonic() - self.started,
                bytes_in=self.bytes_in,
                bytes_out=self.bytes_out,
                why=why,
            )
        for task in self._tasks:
            if task is not asyncio.current_task():
                task.cancel()

    def tell(self, message: str) -> None:
        """A line for the person connected (stderr where there is one)."""

    def finish_channel(self) -> None:
        assert self.chan is not None
        self.chan.close()


class GatewaySession(Carried, asyncssh.SSHServerSession):
    """`ssh JOB@gateway [command]`, a terminal, `sftp`/`scp`."""

    def __init__(self, owner: GatewayConnection) -> None:
        super().__init__(owner)
        self.pty: dict | None = None
        self.command: str | None = None
        self.subsystem: str | None = None
        self.exit_sent = False

    def connection_made(self, chan: asyncssh.SSHServerChannel) -> None:
        self.chan = chan

    def pty_requested(self, term_type: str, term_size: tuple, term_modes: dict) -> bool:
        cols, rows = term_size[0] or 80, term_size[1] or 24
        self.pty = {"term": term_type or "xterm", "cols": cols, "rows": rows}
        return True

    def shell_requested(self) -> bool:
        self.description = "a shell"
        return True

    def exec_requested(self, command: str) -> bool:
        self.command = command
        self.description = "a command"
        return True

    def subsystem_requested(self, subsystem: str) -> bool:
        if subsystem != "sftp":
            return False
        self.subsystem = subsystem
        self.description = "sftp"
        return True

    def session_started(self) -> None:
        self.spawn(self._start())

    async def _start(self) -> None:
        assert self.chan is not None
        env = {
            key: value
            for key, value in (self.chan.get_environment() or {}).items()
            if key in CLIENT_ENV or key.startswith("LC_")
        }
        request = shell_request(
            command=self.command, subsystem=self.subsystem, pty=self.pty, env=env
        )
        try:
            first = await self.open(request)
        except ShellUnavailable as exc:
            self.tell(f"trainyard: {exc}")
            self.chan.exit(EXIT_UNAVAILABLE)
            return
        except Exception:
            log.exception("opening a session into %s", self.owner.grant.job_id)
            self.tell("trainyard: the session could not be opened (the gateway's log says why)")
            self.chan.exit(EXIT_UNAVAILABLE)
            return
        self.start_pumps(first)

    def data_received(self, data: bytes, datatype: int | None) -> None:
        self.queue_down(protocol.FRAME_STDIN, data)

    def eof_received(self) -> bool:
        self.queue_down(protocol.FRAME_EOF)
        return True  # half-closed: the workload's output still comes back

    def terminal_size_changed(self, width: int, height: int, pw: int, ph: int) -> None:
        if self.pty is not None:
            self.queue_down(
                protocol.FRAME_WINDOW, json.dumps({"cols": width, "rows": height}).encode()
            )

    def signal_received(self, signal: str) -> None:
        self.queue_down(protocol.FRAME_SIGNAL, json.dumps({"name": signal}).encode())

    def connection_lost(self, exc: Exception | None) -> None:
        self.spawn(self.end("the client disconnected", notify=False))

    async def deliver(self, kind: bytes, payload: bytes) -> bool:
        assert self.chan is not None
        if kind == protocol.FRAME_STDOUT:
            await self.write(payload)
        elif kind == protocol.FRAME_STDERR:
            await self.write(payload, stderr=True)
        elif kind == protocol.FRAME_EXIT:
            status = json.loads(payload or b"{}")
            await self.tell_if_attempt_ended()
            self.exit_sent = True
            if "signal" in status:
                self.chan.exit_with_signal(str(status["signal"]))
            else:
                self.chan.exit(int(status.get("status", 0)))
            return True
        elif kind == protocol.FRAME_CLOSED:
            await self.tell_if_attempt_ended()
            return True
        return False

    async def tell_if_attempt_ended(self) -> None:
        """The runner ended the session because its attempt is ending: say so."""
        if self.owner.attempt_id is None or self.exit_sent:
            return
        why = await sync_to_async(access.attempt_live)(self.owner.attempt_id)
        if why:
            self.attempt_ended = why
            self.tell(f"trainyard: closing the session: {why}")

    def tell(self, message: str) -> None:
        assert self.chan is not None
        line = f"\r\n{message}\r\n" if self.pty else f"{message}\n"
        with contextlib.suppress(Exception):
            self.chan.write_stderr(line.encode())

    def finish_channel(self) -> None:
        assert self.chan is not None
        with contextlib.suppress(Exception):
            if not self.exit_sent:
                self.exit_sent = True
                self.chan.exit(EXIT_UNAVAILABLE)
            self.chan.close()


class GatewayTCP(Carried, asyncssh.SSHTCPSession):
    """`ssh -L LOCAL:HOST:PORT`: one connection opened from inside the workload."""

    kind = "tcp"

    def __init__(self, owner: GatewayConnection, host: str, port: int) -> None:
        super().__init__(owner)
        self.host, self.port = host, port
        self.description = f"a forward to {host}:{port}"
        self.first: list[tuple[bytes, bytes]] = []

    def connection_made(self, chan: asyncssh.SSHTCPChannel) -> None:
        self.chan = chan

    def session_started(self) -> None:
        self.start_pumps(self.first)

    def data_received(self, data: bytes, datatype: int | None) -> None:
        self.queue_down(protocol.FRAME_STDIN, data)

    def eof_received(self) -> bool:
        self.queue_down(protocol.FRAME_EOF)
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self.spawn(self.end("the client closed the connection", notify=False))

    async def deliver(self, kind: bytes, payload: bytes) -> bool:
        assert self.chan is not None
        if kind == protocol.FRAME_STDOUT:
            await self.write(payload)
        elif kind in (protocol.FRAME_CLOSED, protocol.FRAME_EXIT):
            with contextlib.suppress(Exception):
                self.chan.write_eof()
            return kind == protocol.FRAME_CLOSED
        return False


async def open_tcp(owner: GatewayConnection, host: str, port: int) -> GatewayTCP:
    """The TCP session for a direct-tcpip request, once the runner connected; raises
    ChannelOpenError (the client sees "connect failed" and why) when it could not."""
    carried = GatewayTCP(owner, host, port)
    try:
        carried.first = await carried.open(shell_request(kind="tcp", host=host, port=port))
    except ShellUnavailable as exc:
        raise asyncssh.ChannelOpenError(asyncssh.OPEN_CONNECT_FAILED, str(exc)) from None
    return carried
