"""Runners behind a host relay (`runner.relay`), for real: jobs submitted through the API, a
real Celery worker launching real runners on the local provider whose config names the relay,
the relay bundling their log batches and heartbeats into `POST relay` on the real web
server. Every line arrives once and in order, the workload never sees the relay's address,
and a relay that goes away mid-job costs nothing: the runner then talks to the control plane
itself."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request

import pytest
from django.conf import settings

from apps.providers.models import Provider
from tests.integration.conftest import TERMINAL
from tests.integration.stack import wait_for

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

PRINTS = r"""
import os, sys, time
print("relay seen by the workload:", os.environ.get("TRAINYARD_RELAY_URL", "absent"), flush=True)
for n in range(1, {lines} + 1):
    print(f"line {{n}}", flush=True)
    if n % 20 == 0:
        time.sleep({pause})
"""


RELAY_ARGS = ("--listen", "127.0.0.1:0", "--upstream")


class Relay:
    def __init__(self, upstream: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "runner.relay", *RELAY_ARGS, upstream],
            stdout=subprocess.PIPE,
            cwd=settings.BASE_DIR,
        )
        self.url = json.loads(self.proc.stdout.readline())["listening"]

    def status(self) -> dict:
        with urllib.request.urlopen(f"{self.url}/status", timeout=5) as answer:
            return json.loads(answer.read())

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)
        self.proc.stdout.close()


@pytest.fixture
def relay(live_stack):
    """A relay in front of the stack, named by the local provider's config."""
    running = Relay(live_stack.url)
    provider = Provider.objects.get(name="local")
    config = dict(provider.config)
    Provider.objects.filter(pk=provider.pk).update(config={**config, "relay_url": running.url})
    yield running
    Provider.objects.filter(pk=provider.pk).update(config=config)
    running.stop()


def _submit(api, lines: int, pause: float) -> dict:
    script = PRINTS.format(lines=lines, pause=pause)
    command = ["python", "-c", script]
    return api.submit(command=command)


def _user_lines(api, job_id: str) -> list[str]:
    return [line["message"] for line in api.logs(job_id, source="user")]


def test_runners_behind_a_relay_store_every_line_once_and_in_order(api, relay):
    jobs = [_submit(api, lines=300, pause=0.05) for _ in range(2)]

    done = [api.wait_state(job["id"], TERMINAL, timeout=90) for job in jobs]

    assert [job["state"] for job in done] == ["succeeded", "succeeded"]
    expected = ["relay seen by the workload: absent"] + [f"line {n}" for n in range(1, 301)]
    for job in jobs:
        assert _user_lines(api, job["id"]) == expected
    counts = relay.status()
    assert counts["relayed"] >= 2  # at least a batch of each runner went by the relay
    assert counts["bundles"] >= 1


def test_a_relay_that_goes_away_mid_job_loses_nothing(api, relay):
    job = _submit(api, lines=400, pause=0.25)
    wait_for(lambda: relay.status()["relayed"] >= 1, timeout=60, what="a call by the relay")

    relay.stop()  # the runner's next batches find nobody there

    done = api.wait_state(job["id"], TERMINAL, timeout=90)
    assert done["state"] == "succeeded"
    expected = ["relay seen by the workload: absent"] + [f"line {n}" for n in range(1, 401)]
    assert _user_lines(api, job["id"]) == expected
