"""A Transport over the system OpenSSH client: commands run on one far host as one user.

What holds:
- The host key is pinned: the provider's known_hosts line (config `host_key`) is the only
  entry of the known_hosts file ssh is given (`StrictHostKeyChecking=yes`, no global file,
  `UpdateHostKeys=no`), so a host whose key differs is refused and a new key is never
  accepted silently.
- The private key (from the provider's credentials) is a 0600 file in a 0700 directory of
  the control plane (settings SSH_STATE_DIR), named by a digest of the connection's
  settings; `IdentitiesOnly=yes` and `-F /dev/null` keep the user's own keys, agent and
  ssh_config out of it. `BatchMode=yes`: ssh never prompts.
- Connections are shared: `ControlMaster=auto`, a ControlPath per connection setting and
  `ControlPersist=60` keep one master connection open between calls. A changed host key or
  private key is a new digest, so it never rides on an old connection.
- Errors: ssh's own exit status 255 with "Host key verification failed" (or a changed host
  identification), "Permission denied" or an unusable key file raises PermanentBackendError
  with a message that names the host and what to fix; any other exit 255 (a refused or
  dropped connection) and a time-out raise RetryableBackendError. A command that ran
  returns its CompletedProcess, whatever its status.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from apps.providers.backends.base import PermanentBackendError, RetryableBackendError
from apps.providers.backends.transport import PASSED_ENV

SSH_FAILED = 255  # ssh's own exit status when it could not run the command
# A Unix socket's path is limited (108 bytes on Linux, less elsewhere).
MAX_SOCKET_PATH = 100
HOST_KEY_ERRORS = (
    "host key verification failed",
    "remote host identification has changed",
    "host key for",  # "Host key for x has changed and you have requested strict checking"
)
AUTH_ERRORS = ("permission denied", "too many authentication failures")
KEY_FILE_ERRORS = ("load key", "invalid format", "bad permissions")


class SshTransport:
    """Runs commands as `user` on `host:port` with the system `ssh` client."""

    def __init__(
        self,
        host: str,
        port: int,
        user: str,
        host_key: str,
        private_key: str,
        state_dir: str | Path,
        *,
        connect_timeout: int = 10,
    ) -> None:
        if not host or not user:
            raise PermanentBackendError("An SSH provider needs config `host` and `user`.")
        if not host_key.strip():
            raise PermanentBackendError(
                f"The SSH provider for {host} has no pinned host key: set config `host_key` "
                "to the host's known_hosts key (e.g. the output of `ssh-keyscan -t ed25519 "
                f"-p {port} {host}` without the host name)."
            )
        if not private_key.strip():
            raise PermanentBackendError(
                f"The SSH provider for {host} has no private key: set its credentials "
                "`private_key`."
            )
        self.host = host
        self.port = int(port)
        self.user = user
        self.host_key = _key_of(host_key)
        self.private_key = private_key.strip() + "\n"
        self.state_dir = Path(state_dir)
        self.connect_timeout = connect_timeout

    def describe(self) -> str:
        return f"{self.user}@{self.host}:{self.port}"

    @property
    def digest(self) -> str:
        """Names this connection's files: every setting that changes what is trusted."""
        settings = [self.host, self.port, self.user, self.host_key, self.private_key]
        return hashlib.sha256(json.dumps(settings).encode()).hexdigest()[:16]

    def known_hosts_line(self) -> str:
        name = self.host if self.port == 22 else f"[{self.host}]:{self.port}"
        return f"{name} {self.host_key}\n"

    def _prepare(self) -> tuple[Path, Path, Path]:
        """The connection's known_hosts file, key file and control socket path (the files
        written when missing or changed)."""
        home = _private_dir(self.state_dir) / self.digest
        _private_dir(home)
        known_hosts, key = home / "known_hosts", home / "id"
        _write_private(known_hosts, self.known_hosts_line())
        _write_private(key, self.private_key)
        control = home / "cm"
        if len(str(control)) > MAX_SOCKET_PATH:
            short = _private_dir(Path(tempfile.gettempdir()) / f"trainyard-ssh-{os.getuid()}")
            control = short / self.digest
        return known_hosts, key, control

    def ssh_argv(self, remote_command: str) -> list[str]:
        """The whole `ssh` command line that runs `remote_command` (one shell string)."""
        known_hosts, key, control = self._prepare()
        options = {
            "BatchMode": "yes",
            "StrictHostKeyChecking": "yes",
            "UserKnownHostsFile": str(known_hosts),
            "GlobalKnownHostsFile": "/dev/null",
            "UpdateHostKeys": "no",
            "CheckHostIP": "no",
            "IdentitiesOnly": "yes",
            "IdentityAgent": "none",
            "ControlMaster": "auto",
            "ControlPath": str(control),
            "ControlPersist": "60",
            "ConnectTimeout": str(self.connect_timeout),
            "ServerAliveInterval": "15",
            "ServerAliveCountMax": "3",
            "LogLevel": "ERROR",
        }
        argv = ["ssh", "-F", "/dev/null", "-T", "-i", str(key), "-p", str(self.port)]
        argv += [item for name, value in options.items() for item in ("-o", f"{name}={value}")]
        return [*argv, "-l", self.user, "--", self.host, remote_command]

    def run(
        self, argv: Sequence[str], *, input: bytes | None = None, timeout: float = 30.0
    ) -> subprocess.CompletedProcess[bytes]:
        """Run `argv` on the far host (its words quoted for the remote shell)."""
        command = self.ssh_argv(shlex.join(argv))
        env = {name: os.environ[name] for name in PASSED_ENV if name in os.environ}
        try:
            done = subprocess.run(
                command,
                input=input,
                capture_output=True,
                timeout=timeout,
                env=env,
                stdin=None if input is not None else subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired as exc:
            raise RetryableBackendError(
                f"ssh to {self.describe()} timed out after {timeout:g}s running {argv[0]}"
            ) from exc
        except OSError as exc:
            raise PermanentBackendError(
                f"cannot run the ssh client for {self.describe()}: {exc.strerror}"
            ) from exc
        if done.returncode == SSH_FAILED:
            self._raise_for(done.stderr.decode(errors="replace"))
        return done

    def _raise_for(self, stderr: str) -> None:
        """Raise what ssh's own failure means: permanent for a host key or a private key
        that cannot work, else retryable (the commands Trainyard runs never exit 255
        themselves)."""
        text = stderr.lower()
        last = stderr.strip().splitlines()[-1] if stderr.strip() else "no message"
        if any(marker in text for marker in HOST_KEY_ERRORS):
            raise PermanentBackendError(
                f"The host key of {self.host}:{self.port} does not match the pinned host key "
                "(provider config `host_key`). If the host was reinstalled or its key rotated "
                "on purpose, check the new key out of band and update `host_key`; otherwise "
                "someone may be impersonating the host. Trainyard never accepts a new key by "
                "itself."
            )
        if any(marker in text for marker in AUTH_ERRORS):
            raise PermanentBackendError(
                f"{self.describe()} refused the provider's private key (permission denied): "
                f"add its public key to ~{self.user}/.ssh/authorized_keys on {self.host}, or "
                "set the provider's credentials `private_key` to a key that host accepts."
            )
        if any(marker in text for marker in KEY_FILE_ERRORS):
            raise PermanentBackendError(
                f"The provider's private key for {self.describe()} is not usable ({last}): "
                "set credentials `private_key` to an OpenSSH private key without a passphrase."
            )
        raise RetryableBackendError(f"ssh to {self.describe()} failed: {last}")


def _key_of(line: str) -> str:
    """`type base64` of a known_hosts line or a public key line: a leading host name
    pattern, a trailing comment and a @marker are dropped."""
    words = line.strip().split()
    if words and words[0].startswith("@"):
        words = words[1:]
    for index, word in enumerate(words):
        if word.startswith(("ssh-", "ecdsa-", "sk-")) and index + 1 < len(words):
            return f"{word} {words[index + 1]}"
    raise PermanentBackendError(
        f"config `host_key` is not a known_hosts key line (`ssh-ed25519 AAAA...`): {line!r}"
    )


def _private_dir(path: Path) -> Path:
    """`path`, created when missing, mode 0700."""
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o700)
    return path


def _write_private(path: Path, content: str) -> None:
    """Make `path` hold `content`, mode 0600 (written atomically when it differs)."""
    try:
        if path.read_text() == content and (path.stat().st_mode & 0o777) == 0o600:
            return
    except OSError:
        pass
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(descriptor, "w") as handle:  # mkstemp: mode 0600, created exclusively
        handle.write(content)
    os.replace(temporary, path)
