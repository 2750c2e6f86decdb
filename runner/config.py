"""The runner's configuration: the four environment variables a backend sets.

`TRAINYARD_RUNNER_TOKEN`, `TRAINYARD_CONTROL_URL` and `TRAINYARD_WORKDIR` are the runner's
alone; `WORKLOAD_HIDDEN_VARS` lists what is stripped from the workload's environment.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from runner.protocol import ENV_CONTROL_URL, ENV_JOB_ID, ENV_RUNNER_TOKEN, ENV_WORKDIR

REQUIRED_VARS = (ENV_CONTROL_URL, ENV_JOB_ID, ENV_RUNNER_TOKEN, ENV_WORKDIR)
WORKLOAD_HIDDEN_VARS = (ENV_RUNNER_TOKEN, ENV_CONTROL_URL, ENV_WORKDIR)


class ConfigError(Exception):
    """A required variable is missing or unusable; the runner exits 2."""


@dataclass(frozen=True)
class RunnerConfig:
    control_url: str  # without a trailing slash
    job_id: str
    token: str
    workdir: Path  # absolute

    def __repr__(self) -> str:  # never print the token
        return (
            f"RunnerConfig(control_url={self.control_url!r}, job_id={self.job_id!r}, "
            f"workdir={str(self.workdir)!r})"
        )


def load_config(environ: Mapping[str, str] | None = None) -> RunnerConfig:
    """Read the configuration from `environ` (default `os.environ`).

    Raises ConfigError naming every missing or empty variable, or a control URL that is not
    http(s).
    """
    env = os.environ if environ is None else environ
    missing = [name for name in REQUIRED_VARS if not env.get(name, "").strip()]
    if missing:
        raise ConfigError("missing environment variable(s): " + ", ".join(missing))
    control_url = env[ENV_CONTROL_URL].strip().rstrip("/")
    if not control_url.startswith(("http://", "https://")):
        raise ConfigError(f"{ENV_CONTROL_URL} must start with http:// or https://")
    return RunnerConfig(
        control_url=control_url,
        job_id=env[ENV_JOB_ID].strip(),
        token=env[ENV_RUNNER_TOKEN].strip(),
        workdir=Path(env[ENV_WORKDIR]).expanduser().absolute(),
    )
