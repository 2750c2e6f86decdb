"""The runner's configuration: the environment variables a backend sets.

`TRAINYARD_RUNNER_TOKEN` (or `TRAINYARD_RUNNER_TOKEN_FILE`), `TRAINYARD_CONTROL_URL` and
`TRAINYARD_WORKDIR` are the runner's alone, as is the optional `TRAINYARD_RELAY_URL` (a
relay on this host that carries log batches and heartbeats, `runner.relay`) and
`TRAINYARD_CONTROL_SOCKET` (a Unix socket that carries every call, for a runner in a
container with a network of its own: `runner.control_socket`);
`WORKLOAD_HIDDEN_VARS` lists what is stripped from the workload's environment.

The token comes from a file when `TRAINYARD_RUNNER_TOKEN_FILE` names one: the runner reads
it and deletes it at once, before any workload starts, so the token is in no environment
(a workload running as the runner's user can read `/proc/<runner pid>/environ`) and in no
file the workload could find. `TRAINYARD_RUNNER_TOKEN` still works for backends that pass
the token in the environment.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from runner.protocol import (
    ENV_CONTROL_SOCKET,
    ENV_CONTROL_URL,
    ENV_EXIT_MESSAGE_FILE,
    ENV_HUB_CACHE,
    ENV_JOB_ID,
    ENV_RELAY_URL,
    ENV_RUNNER_TOKEN,
    ENV_RUNNER_TOKEN_FILE,
    ENV_WORKDIR,
)

REQUIRED_VARS = (ENV_CONTROL_URL, ENV_JOB_ID, ENV_RUNNER_TOKEN, ENV_WORKDIR)
WORKLOAD_HIDDEN_VARS = (
    ENV_RUNNER_TOKEN,
    ENV_RUNNER_TOKEN_FILE,
    ENV_CONTROL_URL,
    ENV_WORKDIR,
    ENV_RELAY_URL,
    ENV_CONTROL_SOCKET,
    ENV_HUB_CACHE,
    ENV_EXIT_MESSAGE_FILE,
)
MAX_TOKEN_FILE_BYTES = 4096


class ConfigError(Exception):
    """A required variable is missing or unusable; the runner exits 2."""


@dataclass(frozen=True)
class RunnerConfig:
    control_url: str  # without a trailing slash
    job_id: str
    token: str
    workdir: Path  # absolute
    relay_url: str | None = None  # without a trailing slash
    control_socket: str | None = None  # every call goes through it when set

    def __repr__(self) -> str:  # never print the token
        return (
            f"RunnerConfig(control_url={self.control_url!r}, job_id={self.job_id!r}, "
            f"workdir={str(self.workdir)!r}, relay_url={self.relay_url!r}, "
            f"control_socket={self.control_socket!r})"
        )


def read_token_file(path: str) -> str:
    """The token in the file at `path`, which is deleted (also when it is unusable). Raises
    ConfigError when it cannot be read or is empty."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_TOKEN_FILE_BYTES)
    except OSError as exc:
        raise ConfigError(f"cannot read {ENV_RUNNER_TOKEN_FILE} {path}: {exc.strerror}") from exc
    finally:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise ConfigError(
                f"cannot delete {ENV_RUNNER_TOKEN_FILE} {path}: {exc.strerror}"
            ) from exc
    token = raw.decode("utf-8", errors="replace").strip()
    if not token:
        raise ConfigError(f"{ENV_RUNNER_TOKEN_FILE} {path} is empty")
    return token


def load_config(environ: Mapping[str, str] | None = None) -> RunnerConfig:
    """Read the configuration from `environ` (default `os.environ`).

    The token is read from the file `TRAINYARD_RUNNER_TOKEN_FILE` names, which is deleted,
    when it is set; else from `TRAINYARD_RUNNER_TOKEN`. Raises ConfigError naming every
    missing or empty variable, a token file that cannot be read or deleted, or a control URL
    (or relay URL) that is not http(s).
    """
    env = os.environ if environ is None else environ
    token_file = env.get(ENV_RUNNER_TOKEN_FILE, "").strip()
    required = [name for name in REQUIRED_VARS if not (token_file and name == ENV_RUNNER_TOKEN)]
    missing = [name for name in required if not env.get(name, "").strip()]
    if missing:
        raise ConfigError("missing environment variable(s): " + ", ".join(missing))
    control_url = env[ENV_CONTROL_URL].strip().rstrip("/")
    if not control_url.startswith(("http://", "https://")):
        raise ConfigError(f"{ENV_CONTROL_URL} must start with http:// or https://")
    relay_url = env.get(ENV_RELAY_URL, "").strip().rstrip("/") or None
    if relay_url is not None and not relay_url.startswith(("http://", "https://")):
        raise ConfigError(f"{ENV_RELAY_URL} must start with http:// or https://")
    token = read_token_file(token_file) if token_file else env[ENV_RUNNER_TOKEN].strip()
    return RunnerConfig(
        control_url=control_url,
        job_id=env[ENV_JOB_ID].strip(),
        token=token,
        workdir=Path(env[ENV_WORKDIR]).expanduser().absolute(),
        relay_url=relay_url,
        control_socket=env.get(ENV_CONTROL_SOCKET, "").strip() or None,
    )
