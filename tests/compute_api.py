"""The compute API as a user's script talks to it over HTTP (`ComputeApi`), and the fixtures
that give a test one: `compute_org`, an organization with compute enabled, and `api`, a
client of the live stack with a fresh key of it. The integration and serving tests share
them (their conftests import the fixtures from here)."""

from __future__ import annotations

import uuid

import pytest
import requests

from apps.accounts import services as account_services
from tests.factories import OrganizationFactory
from tests.integration.stack import wait_for

TERMINAL = {"succeeded", "failed", "terminated"}


class ComputeApi:
    """A client of the compute API, as a user's script would be."""

    def __init__(self, base: str, key: str) -> None:
        self.base = base
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {key}"

    def submit(
        self,
        *,
        command=None,
        script_b64=None,
        env=None,
        secret_env=None,
        limits=None,
        name="it",
        image="local",
        access=None,
    ) -> dict:
        container = {"image": image, "env": env or {}, "secret_env": secret_env or {}}
        if command is not None:
            container["command"] = command
        if script_b64 is not None:
            container["script_b64"] = script_b64
        body = {
            "name": name,
            "compute": {"accelerator": "cpu", "gpu_count": 1, "ephemeral_disk_gb": 1},
            "container": container,
        }
        if limits:
            body["limits"] = limits
        if access:
            body["access"] = access
        response = self.session.post(
            f"{self.base}/api/v1/compute/jobs",
            json=body,
            headers={"Idempotency-Key": uuid.uuid4().hex},
            timeout=10,
        )
        assert response.status_code == 201, response.text
        return response.json()

    def job(self, job_id: str) -> dict:
        response = self.session.get(f"{self.base}/api/v1/compute/jobs/{job_id}", timeout=10)
        assert response.status_code == 200, response.text
        return response.json()

    def wait_state(self, job_id: str, states: set[str] | str, timeout: float = 60) -> dict:
        """The job once its state is one of `states`. A job that ends in a state not wanted
        fails the wait at once, saying how it ended, rather than after `timeout`."""
        wanted = {states} if isinstance(states, str) else states

        def reached() -> dict | None:
            job = self.job(job_id)
            if job["state"] in wanted:
                return job
            if job["state"] in TERMINAL:
                said = [(event["type"], event["message"]) for event in self.events(job_id)]
                raise AssertionError(
                    f"{job_id} ended {job['state']} ({job.get('reason')}) while waiting for "
                    f"{sorted(wanted)}: {said}"
                )
            return None

        try:
            return wait_for(reached, timeout=timeout, what=f"{job_id} to reach {sorted(wanted)}")
        except TimeoutError as exc:
            job = self.job(job_id)
            said = [(event["type"], event["message"]) for event in self.events(job_id)]
            raise TimeoutError(f"{exc}; it is {job['state']}, its events: {said}") from None

    def terminate(self, job_id: str) -> dict:
        response = self.session.post(
            f"{self.base}/api/v1/compute/jobs/{job_id}/terminate", timeout=10
        )
        assert response.status_code == 200, response.text
        return response.json()

    def logs(self, job_id: str, **params) -> list[dict]:
        lines, cursor = [], None
        while True:
            query = {"limit": 500, **params, **({"cursor": cursor} if cursor else {})}
            response = self.session.get(
                f"{self.base}/api/v1/compute/jobs/{job_id}/logs", params=query, timeout=30
            )
            assert response.status_code == 200, response.text
            body = response.json()
            lines += body["data"]
            if not (cursor := body["next_cursor"]):
                return lines

    def events(self, job_id: str) -> list[dict]:
        response = self.session.get(
            f"{self.base}/api/v1/compute/jobs/{job_id}/events", params={"limit": 500}, timeout=10
        )
        return response.json()["data"]


@pytest.fixture
def compute_org(transactional_db):
    return OrganizationFactory(slug=f"it-{uuid.uuid4().hex[:6]}", compute_enabled=True)


@pytest.fixture
def api(live_stack, compute_org) -> ComputeApi:
    _, key = account_services.api_key_create(organization=compute_org, name="it")
    return ComputeApi(live_stack.url, key)
