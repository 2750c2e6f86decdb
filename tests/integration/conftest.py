"""Fixtures for tests that run jobs for real: one stack (web, worker, beat) per session on
the test database, and per test an organization with an API key talking to it over HTTP."""

from __future__ import annotations

# `compute_org` and `api` come from tests/compute_api.py (a plugin of tests/conftest.py);
# the tests here import TERMINAL from this module.
from tests.compute_api import TERMINAL  # noqa: F401

# `cli`: the installed `trainyard` script as a user runs it against the session's stack.
from tests.integration.cli_user import cli  # noqa: F401

# A workload that runs until the test lets it go (`let_go`): a test that must see it running
# waits on it rather than racing a fixed sleep on a loaded machine.
UNTIL_LET_GO = "until [ -e go ]; do sleep 0.1; done"


def let_go(stack, job_id: str, attempt: int = 1) -> None:
    """End an `UNTIL_LET_GO` workload on the local provider: the file it waits for, in its
    working directory as the host sees it."""
    (stack.workdir / "work" / job_id / f"attempt-{attempt}" / "work" / "go").touch()
