"""The runner as one file: a zipapp of `runner/` (standard library only), built once per
process from the code this control plane runs, so every remote host runs the runner that
matches its control plane. Its name carries its digest (`runner-<sha256[:16]>.pyz`).

A file on a far host is never trusted for being there: every use runs it through
`verified_argv` (`runner.verify`), which hashes it and runs exactly the bytes it hashed, and exits
BUNDLE_MISMATCH (86) when it is missing or differs (a workload of the same Unix user wrote
over it, say). The backend then installs it again and retries once (`install_bundle`
replaces the file atomically). The directory is made 0755: where attempts run as users of
their own (ssh `isolation: users`), no workload can write to it.

`python3 runner-….pyz` runs the runner (as `python -m runner` does);
`python3 runner-….pyz TOOL ARGS...` runs one of the host-side tools in TOOLS, which the
remote backends call over their transport (`runner.hostctl` for SSH hosts, say).
"""

from __future__ import annotations

import hashlib
import io
import posixpath
import shlex
import zipfile
from functools import cache
from pathlib import Path

from apps.providers.backends.base import PermanentBackendError
from apps.providers.backends.transport import Transport
from runner import protocol, verify
from runner.verify import BUNDLE_MISMATCH

__all__ = ["BUNDLE_MISMATCH", "bundle_name", "bundle_sha256", "install_bundle", "verified_argv"]

RUNNER_DIR = Path(protocol.__file__).resolve().parent
# Host-side tools the bundle can run besides the runner: `runner.<name>.main(argv) -> int`.
TOOLS = ("hostctl", "slurmctl", "relay", "sftp_server")
_FIXED_TIME = (2020, 1, 1, 0, 0, 0)  # a deterministic archive: the same code, the same digest

_MAIN = f"""\
import sys
TOOLS = {TOOLS!r}
if len(sys.argv) > 1 and sys.argv[1] in TOOLS:
    import importlib
    tool = importlib.import_module("runner." + sys.argv[1])
    raise SystemExit(tool.main(sys.argv[2:]))
from runner.agent import main
raise SystemExit(main())
"""


@cache
def runner_bundle() -> bytes:
    """The zipapp's bytes (a `#!/usr/bin/env python3` line, then the zip)."""
    buffer = io.BytesIO()
    buffer.write(b"#!/usr/bin/env python3\n")
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        _add(archive, "__main__.py", _MAIN.encode())
        for path in sorted(RUNNER_DIR.glob("*.py")):
            _add(archive, f"runner/{path.name}", path.read_bytes())
    return buffer.getvalue()


def bundle_sha256() -> str:
    return hashlib.sha256(runner_bundle()).hexdigest()


def bundle_name() -> str:
    return f"runner-{bundle_sha256()[:16]}.pyz"


def verified_argv(python: str, path: str, *args: str) -> list[str]:
    """The argv that runs `python PATH ARGS...` only when PATH is this bundle, byte for byte
    (else exit BUNDLE_MISMATCH, nothing of the file run): `runner.verify`."""
    return verify.verified_argv(python, path, bundle_sha256(), *args)


def _add(archive: zipfile.ZipFile, name: str, data: bytes) -> None:
    info = zipfile.ZipInfo(name, date_time=_FIXED_TIME)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o644 << 16
    archive.writestr(info, data)


def install_bundle(transport: Transport, directory: str) -> str:
    """Write this bundle to `directory` on the far side (0755, its file 0644) and return its
    path there. Atomic: a half-written bundle never runs, and a file that was there (a
    tampered one) is replaced whole. Callers install once per process and then rely on
    `verified_argv`, which catches a file changed since."""
    path = posixpath.join(directory, bundle_name())
    script = (
        'set -e; umask 022; mkdir -p "$1"; chmod 0755 "$1"; tmp="$2.$$.tmp"; rm -f "$tmp"; '
        'cat > "$tmp"; chmod 0644 "$tmp"; mv -f "$tmp" "$2"'
    )
    sent = transport.run(
        ["sh", "-c", script, "sh", directory, path], input=runner_bundle(), timeout=60
    )
    if sent.returncode != 0:
        error = sent.stderr.decode(errors="replace").strip()
        raise PermanentBackendError(
            f"could not install the runner at {shlex.quote(path)} "
            f"on {transport.describe()}: {error}"
        )
    return path
