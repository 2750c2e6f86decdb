"""The host runtime never runs a tenant's workload as the control plane's own user unless the
operator marks the host development-only (issue 36, T3-4): through the whole stack, such a
job fails at once, `launch_failed`, with a message that names the setting."""

from __future__ import annotations

import pytest

from apps.jobs.models import Attempt, LogLine
from apps.providers.models import Provider
from tests.integration.conftest import TERMINAL

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


@pytest.fixture
def own_uid_provider(live_stack):
    """The local provider on the host runtime with no run_as user: the runner would run as
    the worker's own uid. `dev_only` is what the test sets."""

    def configure(dev_only: bool) -> None:
        Provider.objects.filter(name="local").update(
            config={"runtime": "host", "run_as": "", "dev_only": dev_only}
        )

    yield configure
    Provider.objects.filter(name="local").update(config={})


def _system_lines(job_id: str) -> list[str]:
    return list(
        LogLine.objects.filter(job__public_id=job_id, source="system").values_list(
            "message", flat=True
        )
    )


def test_a_host_job_as_the_control_planes_uid_fails_launch_failed_naming_the_setting(
    api, own_uid_provider
):
    own_uid_provider(dev_only=False)
    job = api.submit(image="local", command=["python", "-c", "print('ran')"])
    done = api.wait_state(job["id"], TERMINAL, timeout=30)

    assert (done["state"], done["reason"]) == ("failed", "launch_failed")
    lines = _system_lines(job["id"])
    assert any("LOCAL_HOST_RUNTIME_DEV_ONLY=1" in line for line in lines), lines
    assert not LogLine.objects.filter(job__public_id=job["id"], source="user").exists()
    assert Attempt.objects.get(job__public_id=job["id"]).ended_at is not None


def test_marked_development_only_the_same_job_runs(api, own_uid_provider):
    own_uid_provider(dev_only=True)
    job = api.submit(image="local", command=["python", "-c", "print('ran')"])
    done = api.wait_state(job["id"], TERMINAL, timeout=60)

    assert (done["state"], done["exit_code"]) == ("succeeded", 0)
