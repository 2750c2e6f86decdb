"""What most benches repeat: a median of timed calls, an organization that may run jobs, and
a client of the jobs API as a user's script would be.

The organization helpers need Django set up first (they import the models when called);
the rest needs nothing of the project."""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any


def median_ms(fn: Callable[[], Any], repeats: int, *, warm: bool = True) -> float:
    """The median wall time of `repeats` calls of `fn`, in milliseconds; with `warm`, one
    call first that is not counted (caches, the first connection)."""
    if warm:
        fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def funded_org(slug: str, *, name: str | None = None, credits_micros: int = 10**12):
    """An organization with compute enabled and `credits_micros` granted (a million dollars
    by default: no bench should stop on its balance)."""
    from apps.accounts import services
    from apps.billing import ledger

    org = services.organization_create(name=name or slug, slug=slug, compute_enabled=True)
    ledger.grant(
        organization=org, amount_micros=credits_micros, idempotency_key=f"bench-credits:{slug}"
    )
    return org


def api_key(org, name: str = "bench", **extra) -> str:
    """A new API key of `org` (the secret, as a client sends it)."""
    from apps.accounts import services

    _, key = services.api_key_create(organization=org, name=name, **extra)
    return key


class JobsApi:
    """`/api/v1/compute/jobs` over HTTP with one API key."""

    def __init__(self, base: str, key: str, *, timeout_s: float = 10) -> None:
        import requests

        self.base = f"{base}/api/v1/compute/jobs"
        self.timeout_s = timeout_s
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {key}"

    def post_job(self, name: str, command: list[str]):
        """POST a one-GPU `cpu` job on the host runtime (`image: local`); the response."""
        body = {
            "name": name,
            "compute": {"accelerator": "cpu", "gpu_count": 1, "ephemeral_disk_gb": 1},
            "container": {"image": "local", "command": command},
        }
        return self.session.post(
            self.base,
            json=body,
            headers={"Idempotency-Key": uuid.uuid4().hex},
            timeout=self.timeout_s,
        )

    def submit(self, name: str, command: list[str]) -> str:
        """The new job's id; a refused submit fails the bench."""
        response = self.post_job(name, command)
        assert response.status_code == 201, response.text
        return response.json()["id"]

    def state(self, job_id: str) -> str:
        response = self.session.get(f"{self.base}/{job_id}", timeout=self.timeout_s)
        assert response.status_code == 200, response.text
        return response.json()["state"]

    def why(self, job_id: str) -> str:
        """The job's reason and its system log, for a failure's message."""
        job = self.session.get(f"{self.base}/{job_id}", timeout=self.timeout_s).json()
        logs = self.session.get(
            f"{self.base}/{job_id}/logs", params={"source": "system"}, timeout=self.timeout_s
        ).json()
        lines = [line["message"] for line in logs.get("data", [])]
        return f"{job.get('reason')}: {job.get('error_message')}; " + " | ".join(lines)

    def terminate(self, job_id: str) -> None:
        self.session.post(f"{self.base}/{job_id}/terminate", timeout=self.timeout_s)

    def wait(self, job_id: str, states: set[str], timeout: float = 120) -> str:
        deadline = time.monotonic() + timeout
        while (state := self.state(job_id)) not in states:
            assert time.monotonic() < deadline, f"{job_id} still {state} after {timeout:g} s"
            time.sleep(0.05)
        return state
