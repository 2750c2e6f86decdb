"""`trainyard ssh JOB [-- COMMAND…]` and `trainyard port-forward JOB LOCAL[:REMOTE]`: the
system OpenSSH client, pointed at the control plane's SSH gateway for a running job.

Both read the job's `ssh` field from the API (null: the job is not running, or the control
plane runs no gateway) and pin the gateway's host key, as the API gives it over HTTPS, in a
known_hosts file of the CLI's own (`known_hosts` beside the config file:
`~/.config/trainyard/known_hosts`), one line per gateway (`[host]:port <type> <base64>`).
The first use writes the line; a later answer with another key is refused, as OpenSSH
refuses a changed host key, unless `--accept-new-host-key` replaces it. `ssh` then runs with
that file alone and `StrictHostKeyChecking=yes`, so it checks the gateway against the pin.

`ssh` runs as a child with this terminal (Ctrl-C and the tty go to it; we let SIGINT pass
meanwhile), and its exit status is ours: 255 is ssh's own failure, otherwise the remote
command's. Authentication is ssh's own: your agent and default keys, or `--identity FILE`.
A key the gateway accepts is the job's `access.ssh_public_key` or one you registered on
the organization's Settings page (viewers cannot open sessions).
"""

from __future__ import annotations

import argparse
import base64
import binascii
import hashlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

from trainyard_cli import config, output
from trainyard_cli.client import CliError, UsageError
from trainyard_cli.commands import Context, seg

JOBS = "/api/v1/compute/jobs"
KNOWN_HOSTS = "known_hosts"
# What may reach ssh's argv and the known_hosts file from the API's answer: a host name or
# address, a job id, a key line. Anything else is refused rather than passed on.
HOST = re.compile(r"^[A-Za-z0-9._:-]{1,253}$")
USER = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
KEY_TYPE = re.compile(r"^[A-Za-z0-9@._-]{1,64}$")
PORT_RANGE = range(1, 65536)


class HostKeyChanged(CliError):
    """The gateway's key is not the one pinned (exit 1, as a refused connection)."""


def known_hosts_path() -> Path:
    return config.config_path().parent / KNOWN_HOSTS


def host_pattern(host: str, port: int) -> str:
    """How OpenSSH names `host:port` in known_hosts (`host` alone on port 22)."""
    host = host.lower()
    return host if port == 22 else f"[{host}]:{port}"


def fingerprint(key_line: str) -> str:
    blob = base64.b64decode(key_line.split()[1])
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def gateway_of(ctx: Context, job_id: str) -> dict:
    """The job's `ssh` field, checked; a clear error when there is none."""
    job = ctx.client.get_json(f"{JOBS}/{seg(job_id)}")
    ssh = job.get("ssh")
    if not ssh:
        if job.get("state") != "running":
            raise CliError(
                f"{job.get('id', job_id)} is {job.get('state')}: only a running job can be "
                "reached over SSH."
            )
        raise CliError(
            "This control plane runs no SSH gateway (its SSH_GATEWAY_PORT is 0): ask its "
            "operator to turn it on."
        )
    host, port, user = str(ssh.get("host", "")), ssh.get("port"), str(ssh.get("user", ""))
    key = str(ssh.get("host_key") or "")
    parts = key.split()
    well_formed = (
        HOST.match(host)
        and not host.startswith("-")
        and isinstance(port, int)
        and port in PORT_RANGE
        and USER.match(user)
        and len(parts) == 2
        and KEY_TYPE.match(parts[0])
    )
    try:
        well_formed = well_formed and bool(base64.b64decode(parts[1], validate=True))
    except (binascii.Error, ValueError, IndexError):
        well_formed = False
    if not well_formed:
        raise CliError("The API's answer for the SSH gateway is not one this CLI can use.")
    stated = ssh.get("host_key_fingerprint")
    if stated and stated != fingerprint(key):
        raise CliError("The API's host key and its fingerprint disagree; not connecting.")
    return {"host": host, "port": port, "user": user, "host_key": " ".join(parts)}


def pin_host_key(path: Path, host: str, port: int, key: str, *, accept_new: bool) -> None:
    """Make `path` say `key` for the gateway at `host:port`: write it on first use, keep it
    when it is the same, refuse a different one unless `accept_new`."""
    pattern = host_pattern(host, port)
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        lines = []
    kept, pinned = [], None
    for line in lines:
        fields = line.split()
        if len(fields) >= 3 and fields[0] == pattern:
            pinned = f"{fields[1]} {fields[2]}"
        else:
            kept.append(line)
    if pinned == key:
        return
    if pinned is not None and not accept_new:
        raise HostKeyChanged(
            f"The SSH gateway's host key for {pattern} has changed: you pinned "
            f"{fingerprint(pinned)} in {path}, and the control plane now says "
            f"{fingerprint(key)}. Someone could be in the middle, or the gateway's key was "
            "replaced. Ask the control plane's operator; if the change is expected, run again "
            "with --accept-new-host-key."
        )
    _write(path, [*kept, f"{pattern} {key}"])
    verb = "Replaced the pinned" if pinned else "Pinned the"
    output.info(f"{verb} SSH gateway host key {fingerprint(key)} for {pattern} in {path}.")


def _write(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".known_hosts-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as out:
            out.write("".join(f"{line}\n" for line in lines))
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _ssh_binary() -> str:
    found = shutil.which("ssh")
    if found is None:
        raise CliError(
            "No `ssh` command on PATH: install OpenSSH's client (e.g. `apt install "
            "openssh-client`, or Windows' optional OpenSSH Client feature)."
        )
    return found


def _option_path(path: Path) -> str:
    # ssh splits an option's value at whitespace unless it is quoted.
    text = str(path)
    return f'"{text}"' if any(c.isspace() for c in text) else text


def ssh_argv(
    binary: str, gateway: dict, known_hosts: Path, identity: str | None, extra: list[str]
) -> list[str]:
    """`ssh` with the gateway's port and our pin; `--` before the destination, so neither it
    nor the remote command after it is read as ssh's options."""
    argv = [
        binary,
        "-p",
        str(gateway["port"]),
        "-o",
        f"UserKnownHostsFile={_option_path(known_hosts)}",
        "-o",
        "StrictHostKeyChecking=yes",
    ]
    if identity:
        argv += ["-i", identity]
    return [*argv, *extra, "--", f"{gateway['user']}@{gateway['host']}"]


def _connect(ctx: Context, args: argparse.Namespace) -> tuple[str, dict, Path]:
    binary = _ssh_binary()
    gateway = gateway_of(ctx, args.job)
    path = known_hosts_path()
    pin_host_key(
        path,
        gateway["host"],
        gateway["port"],
        gateway["host_key"],
        accept_new=args.accept_new_host_key,
    )
    return binary, gateway, path


def _identity(args: argparse.Namespace) -> str | None:
    if not args.identity:
        return None
    identity = Path(args.identity).expanduser()
    if not identity.is_file():
        raise UsageError(f"--identity {args.identity}: no such file.")
    return str(identity)


def _ignore(signum, frame) -> None:
    pass


def _run(argv: list[str]) -> int:
    """Run ssh in this terminal; its exit status (128 + the signal that killed it). Ctrl-C
    is ssh's to handle: we catch SIGINT with a handler that does nothing (not SIG_IGN, which
    ssh would inherit and keep, so `port-forward` could not be stopped)."""
    previous = signal.signal(signal.SIGINT, _ignore)
    try:
        code = subprocess.call(argv)
    finally:
        signal.signal(signal.SIGINT, previous)
    return 128 - code if code < 0 else code


def shell(ctx: Context, args: argparse.Namespace) -> int:
    identity = _identity(args)
    binary, gateway, path = _connect(ctx, args)
    argv = ssh_argv(binary, gateway, path, identity, [])
    return _run([*argv, *args.job_command])


def parse_ports(value: str) -> tuple[int, int]:
    """`LOCAL[:REMOTE]` as two ports; REMOTE defaults to LOCAL."""
    local, sep, remote = value.partition(":")
    try:
        ports = int(local), int(remote if sep else local)
    except ValueError:
        ports = (0, 0)
    if not all(port in PORT_RANGE for port in ports):
        raise UsageError(f"{value!r}: expected LOCAL[:REMOTE], ports from 1 to 65535.")
    return ports


def port_forward(ctx: Context, args: argparse.Namespace) -> int:
    local, remote = parse_ports(args.ports)
    identity = _identity(args)
    binary, gateway, path = _connect(ctx, args)
    forward = ["-N", "-o", "ExitOnForwardFailure=yes", "-L", f"{local}:localhost:{remote}"]
    argv = ssh_argv(binary, gateway, path, identity, forward)
    output.info(
        f"Forwarding localhost:{local} to port {remote} on {gateway['user']}'s localhost "
        "(through the SSH gateway); Ctrl-C stops."
    )
    return _run(argv)
