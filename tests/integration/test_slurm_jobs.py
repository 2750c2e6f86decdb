"""A job run for real on the slurm provider: API → Celery dispatch → sbatch → the runner in a
batch job of a real single-node cluster → ingestion → `succeeded`."""

from __future__ import annotations

import pytest

from apps.jobs.models import Attempt
from tests.integration.conftest import TERMINAL

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


def test_an_api_job_runs_on_the_slurm_provider_to_succeeded(slurm_provider, slurm_cluster, api):
    job = api.submit(command=["bash", "-c", 'echo "hello from Slurm job $SLURM_JOB_ID"'])
    done = api.wait_state(job["id"], TERMINAL, timeout=90)
    assert (done["state"], done["exit_code"], done["reason"]) == ("succeeded", 0, None)
    attempt = Attempt.objects.get(job__public_id=job["id"])
    assert attempt.provider == slurm_provider
    slurm_id = attempt.handle["job_id"]
    assert attempt.handle["name"] == f"ty-{job['id']}-1"
    assert [line["message"] for line in api.logs(job["id"], source="user")] == [
        f"hello from Slurm job {slurm_id}"
    ]
    system = [line["message"] for line in api.logs(job["id"], source="system")]
    assert any(message.startswith("allocated slurm: cpu x1") for message in system)
    assert slurm_cluster.job_state(slurm_id) in {None, "COMPLETED"}
