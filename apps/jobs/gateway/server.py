"""The SSH server: one GatewayConnection per client connection. Public keys only; the user
is a job id (access.authorize). Sessions and direct TCP connections are carried to the job's
runner (sessions.py); everything else an SSH server may offer (passwords, remote
forwarding, agent and X11 forwarding) is refused. A watcher ends every session of the
connection, saying why, when the job's attempt ends, a session goes idle past
SSH_SESSION_IDLE_TIMEOUT_S or carries more than SSH_SESSION_MAX_BYTES."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal

import asyncssh
from asgiref.sync import sync_to_async
from django.conf import settings

from apps.jobs.gateway import access
from apps.jobs.gateway.sessions import Carried, GatewaySession, open_tcp
from apps.jobs.shell.hostkey import gateway_host_key

log = logging.getLogger("trainyard.gateway")

WATCH_INTERVAL_S = 2.0
LOGIN_TIMEOUT_S = 30


class GatewayConnection(asyncssh.SSHServer):
    def __init__(self) -> None:
        self.conn: asyncssh.SSHServerConnection | None = None
        self.grant: access.Grant | None = None
        self.attempt_id: int | None = None
        self.carried: set[Carried] = set()
        self._watcher: asyncio.Task | None = None

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self.conn = conn

    def connection_lost(self, exc: Exception | None) -> None:
        if self._watcher is not None:
            self._watcher.cancel()

    def begin_auth(self, username: str) -> bool:
        return True

    def password_auth_supported(self) -> bool:
        return False

    def kbdint_auth_supported(self) -> bool:
        return False

    def public_key_auth_supported(self) -> bool:
        return True

    async def validate_public_key(self, username: str, key: asyncssh.SSHKey) -> bool:
        line = key.export_public_key("openssh").decode().strip()
        grant = await sync_to_async(access.authorize)(username, line)
        if grant is None:
            log.info("refused key %s for %r", key.get_fingerprint(), username)
            return False
        self.grant = grant
        return True

    def auth_completed(self) -> None:
        self._watcher = asyncio.ensure_future(self._watch())

    def session_requested(self) -> GatewaySession:
        assert self.grant is not None
        return GatewaySession(self)

    def connection_requested(self, dest_host: str, dest_port: int, orig_host: str, orig_port: int):
        assert self.grant is not None
        return open_tcp(self, dest_host, dest_port)

    def server_requested(self, listen_host: str, listen_port: int) -> bool:
        return False  # no remote forwarding: nothing inside a job listens on our side

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(WATCH_INTERVAL_S)
            if not self.carried or self.attempt_id is None:
                continue
            ended = await sync_to_async(access.attempt_live)(self.attempt_id)
            for carried in list(self.carried):
                why = ended or carried.over_bounds()
                if why:
                    await carried.end(why)


async def serve(bind: str, port: int) -> asyncssh.SSHAcceptor:
    """Listen on `bind`:`port` with the gateway's host key."""
    host_key = asyncssh.import_private_key(gateway_host_key().private_pem)
    return await asyncssh.listen(
        bind,
        port,
        server_factory=GatewayConnection,
        server_host_keys=[host_key],
        encoding=None,
        login_timeout=LOGIN_TIMEOUT_S,
        agent_forwarding=False,
        x11_forwarding=False,
        allow_pty=True,
        line_editor=False,
        keepalive_interval=30,
        server_version="Trainyard",
    )


def run(bind: str | None = None, port: int | None = None) -> None:
    """Serve until SIGTERM or SIGINT (`manage.py ssh_gateway`): then stop taking connections
    and close the open ones (their clients see the connection end)."""

    async def main() -> None:
        acceptor = await serve(bind or settings.SSH_GATEWAY_BIND, port or settings.SSH_GATEWAY_PORT)
        log.info("SSH gateway listening on %s", acceptor.sockets[0].getsockname())
        stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stopping.set)
        await stopping.wait()
        acceptor.close()
        with contextlib.suppress(asyncio.CancelledError):
            await acceptor.wait_closed()

    asyncio.run(main())
