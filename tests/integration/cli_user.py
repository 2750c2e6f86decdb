"""The `trainyard` console script as a user runs it against the live stack: the installed
script in a subprocess, configured by TRAINYARD_URL and TRAINYARD_API_KEY (or the file
`trainyard login` writes), with a HOME of its own. `cli` is the fixture: an organization's
API key on the session's stack."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from apps.accounts import services as account_services
from tests.live import BIN, base_env

TRAINYARD = str(BIN / "trainyard")


class Cli:
    def __init__(self, url: str, key: str, home: Path) -> None:
        self.url, self.key, self.home = url, key, home

    def __call__(
        self,
        *args: str,
        timeout: float = 60,
        with_key: bool = True,
        cwd: Path | None = None,
        stdin: str | None = None,
    ) -> subprocess.CompletedProcess:
        env = base_env(HOME=str(self.home), COLUMNS="200")
        env.pop("XDG_CONFIG_HOME", None)
        if with_key:
            env |= {"TRAINYARD_URL": self.url, "TRAINYARD_API_KEY": self.key}
        else:
            env.pop("TRAINYARD_URL", None)
            env.pop("TRAINYARD_API_KEY", None)
        result = subprocess.run(
            [TRAINYARD, *args],
            env=env,
            cwd=cwd or self.home,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert self.key not in result.stdout + result.stderr, "the API key was printed"
        return result

    def json(self, *args: str, **kwargs) -> dict:
        result = self(*args, "--json", **kwargs)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    def submit(self, *args: str) -> str:
        result = self("jobs", "submit", *args, timeout=120)
        assert result.returncode == 0, result.stderr
        return result.stdout.strip()

    def wait_state(self, job_id: str, states: set[str], timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        while (job := self.json("jobs", "get", job_id))["state"] not in states:
            assert time.monotonic() < deadline, f"{job_id} is still {job['state']}"
            time.sleep(0.3)
        return job


@pytest.fixture
def cli(live_stack, compute_org, tmp_path) -> Cli:
    _, key = account_services.api_key_create(organization=compute_org, name="cli")
    home = tmp_path / "home"
    home.mkdir()
    return Cli(live_stack.url, key, home)
