"""Sweeps against the live stack: the real Celery worker runs the trials' jobs, its
`jobs.job_outcome` task advances the sweep, and beat's `sweeps.reconcile` watches the cost.

The cost cap is made to bite at once and deterministically: a trial's job holds its slot
until the test lets it go (it never ends on its own), and the cap ($0.001) is below the
minimum charge of one billed minute on the stack's local CPU offer ($0.10 an hour, so
$0.00167 a minute, billed from allocation, at least one minute). So the first trial's
allocation alone reaches the cap, whatever the machine's speed, and the rest are skipped.
"""

from __future__ import annotations

import pytest

from apps.jobs.models import Job
from apps.sweeps.models import Sweep
from tests.factories import ProjectFactory
from tests.integration.conftest import UNTIL_LET_GO
from tests.integration.stack import wait_for

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


def _create(api, project, body: dict) -> dict:
    response = api.session.post(
        f"{api.base}/api/v1/projects/{project.public_id}/sweeps", json=body, timeout=30
    )
    assert response.status_code == 201, response.text
    return response.json()


def _wait_ended(api, project, sweep_id: str, timeout: float) -> dict:
    url = f"{api.base}/api/v1/projects/{project.public_id}/sweeps/{sweep_id}"

    def ended() -> dict | None:
        sweep = api.session.get(url, timeout=10).json()
        return sweep if sweep["state"] != "running" else None

    return wait_for(ended, timeout=timeout, what=f"sweep {sweep_id} to end")


def test_a_two_by_two_sweep_runs_four_finetunes_two_at_a_time_and_names_the_best(
    api, compute_org, tiny_model, demo_data
):
    project = ProjectFactory(organization=compute_org)
    sweep = _create(
        api,
        project,
        {
            "name": "tiny grid",
            "template": {
                "name": "tiny",
                "model": str(tiny_model),
                "dataset": str(demo_data["alpaca"]),
                "dataset_format": "alpaca",
                "save_steps": 100,
            },
            "params": {"learning_rate": [3e-3, 6e-3], "max_steps": [2, 4]},
            "concurrency": 2,
        },
    )
    assert sweep["counts"] == {"total": 4, "requested": 2, "pending": 2}

    done = _wait_ended(api, project, sweep["id"], timeout=420)

    assert (done["state"], done["stop_reason"]) == ("succeeded", None), done["trials"]
    assert done["counts"] == {"total": 4, "succeeded": 4}
    jobs = Job.objects.filter(public_id__in=[t["job_id"] for t in done["trials"]])
    assert jobs.count() == 4
    # Never more than two at once: at the moment each trial's job was created, at most two
    # trials' jobs (itself included) had been created and not yet ended.
    spans = [(job.created_at, job.terminal_at) for job in jobs]
    for created, _ in spans:
        alive = [1 for start, end in spans if start <= created < end]
        assert len(alive) <= 2, spans
    losses = {t["index"]: t["metric"] for t in done["trials"]}
    assert all(loss is not None for loss in losses.values())
    best = min(losses, key=lambda index: (losses[index], index))
    assert done["best"]["index"] == best
    assert done["best"]["metric"] == losses[best]
    assert [t["best"] for t in done["trials"]].count(True) == 1


def test_the_cost_cap_terminates_the_running_trial_and_skips_the_rest(api, compute_org):
    project = ProjectFactory(organization=compute_org)
    sweep = _create(
        api,
        project,
        {
            "name": "capped",
            "kind": "container",
            "template": {
                "name": "wait",
                "compute": {"accelerator": "cpu", "gpu_count": 1, "ephemeral_disk_gb": 1},
                "container": {
                    "image": "local",
                    "command": ["sh", "-c", UNTIL_LET_GO],
                    "env": {"TRIAL": ""},
                },
            },
            "params": {"container.env.TRIAL": ["a", "b", "c"]},
            "concurrency": 1,
            "max_cost_usd": "0.001",
        },
    )

    done = _wait_ended(api, project, sweep["id"], timeout=90)

    assert (done["state"], done["stop_reason"], done["status"]) == (
        "stopped",
        "cost_cap",
        "stopped: cost_cap",
    )
    first = done["trials"][0]
    ended = api.wait_state(first["job_id"], "terminated", timeout=60)
    assert ended["reason"] == "sweep_cost_cap"
    assert [(t["state"], t["job_id"]) for t in done["trials"][1:]] == [
        ("skipped", None),
        ("skipped", None),
    ]
    assert done["cost_usd"] >= 0.001
    assert Job.objects.filter(organization=compute_org).count() == 1
    assert Sweep.objects.get(public_id=sweep["id"]).ended_at is not None
