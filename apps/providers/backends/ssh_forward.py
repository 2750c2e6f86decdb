"""Local port forwards over SSH: how the control plane reaches a server a workload runs on a
far host (a serve job's engine) without that port being open to anyone else.

`forward(transport, remote_host, remote_port, owner)` returns a port on this machine's
loopback that leads to `remote_host:remote_port` as the far host sees it. One forward per
(connection, remote address) is shared by every process of the control plane (web servers,
workers): a small state file under the connection's private directory names the local port
and the `ssh -N -L` process, under a file lock, and a forward whose process died or whose
port stopped answering is replaced. `close(transport, owner)` ends the forwards an attempt
opened (its `release`).

The forward is a process of its own (not a channel of the ControlMaster connection), so
`ControlPersist` expiring never cuts a stream; `ExitOnForwardFailure` makes a port that
cannot be bound an error at once, and the keep-alives end a forward whose host went away.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import socket
import subprocess
import threading
import time
from contextlib import suppress
from pathlib import Path

from apps.providers.backends.base import RetryableBackendError
from apps.providers.backends.ssh_transport import SshTransport
from apps.providers.backends.transport import PASSED_ENV

READY_TIMEOUT_S = 10.0


def _state_dir(transport: SshTransport) -> Path:
    path = Path(transport.state_dir) / transport.digest / "forwards"
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def _answers(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def forward(transport: SshTransport, remote_host: str, remote_port: int, owner: str) -> int:
    """The loopback port that leads to `remote_host:remote_port` on the far side, opening
    the forward when there is none (or it died). `owner` (an attempt's work directory)
    lets `close` find it. Raises RetryableBackendError when it cannot be opened now."""
    state = _state_dir(transport)
    name = f"{remote_host.replace('/', '_')}_{int(remote_port)}"
    with open(state / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        record_path = state / f"{name}.json"
        with suppress(OSError, ValueError):
            record = json.loads(record_path.read_text())
            if _alive(record["pid"]) and _answers(record["local_port"]):
                return int(record["local_port"])
            _stop(record["pid"])
        local_port = _free_port()
        argv = transport.ssh_argv("")[:-1]  # the options and the host, no command
        argv[1:1] = [
            "-N",
            "-o",
            "ExitOnForwardFailure=yes",
            "-o",
            "ControlMaster=no",
            "-o",
            "ControlPath=none",
            "-L",
            f"127.0.0.1:{local_port}:{remote_host}:{int(remote_port)}",
        ]
        env = {key: os.environ[key] for key in PASSED_ENV if key in os.environ}
        process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # outlives the request or task that opened it
        )
        threading.Thread(target=process.wait, daemon=True).start()  # reaped when it ends
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not _answers(local_port):
            if process.poll() is not None or time.monotonic() > deadline:
                _stop(process.pid)
                raise RetryableBackendError(
                    f"could not forward {remote_host}:{remote_port} from {transport.describe()}"
                )
            time.sleep(0.05)
        record_path.write_text(
            json.dumps({"pid": process.pid, "local_port": local_port, "owner": owner})
        )
        return local_port


def close(transport: SshTransport, owner: str) -> int:
    """End the forwards `owner` opened; how many."""
    closed = 0
    for record_path in _state_dir(transport).glob("*.json"):
        with suppress(OSError, ValueError):
            record = json.loads(record_path.read_text())
            if record.get("owner") == owner:
                _stop(record["pid"])
                record_path.unlink()
                closed += 1
    return closed


def _stop(pid: int) -> None:
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGTERM)
