"""`trainyard apply -f job.yaml` and `trainyard rerun` as a user runs them: the installed
script against a real stack (see test_cli_run.py for the `Cli` helper)."""

from __future__ import annotations

import textwrap

import pytest

from apps.jobs.models import Job
from tests.factories import ProjectFactory

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

JOB_FILE = textwrap.dedent(
    """\
    # yaml-language-server: $schema=http://127.0.0.1/api/v1/compute/jobs/schema
    kind: container
    name: from-a-file
    project: Vision
    compute:
      accelerator: cpu
      gpu_count: 1
      ephemeral_disk_gb: 1
    container:
      image: local
      command: [sh, -c, "echo from the file"]
      env:
        SPEED: slow
    limits:
      max_cost_usd: 2
    """
)


def test_apply_a_job_file_dry_run_first_then_rerun_it_with_a_change(cli, compute_org):
    project = ProjectFactory(organization=compute_org, name="Vision", slug="vision")
    (cli.home / "job.yaml").write_text(JOB_FILE)

    dry = cli("apply", "-f", "job.yaml", "--dry-run")

    assert dry.returncode == 0, dry.stderr
    assert "nothing was created" in dry.stderr
    assert "hold" in dry.stdout and "would run on" in dry.stdout
    assert not Job.objects.filter(organization=compute_org).exists()

    applied = cli("apply", "-f", "job.yaml")

    assert applied.returncode == 0, applied.stderr
    job_id = applied.stdout.strip()
    job = cli.json("jobs", "get", job_id)
    assert (job["name"], job["project"], job["kind"]) == (
        "from-a-file",
        project.public_id,
        "container",
    )
    assert job["container"]["command"] == ["sh", "-c", "echo from the file"]
    assert job["limits"]["max_cost_usd"] == 2.0
    assert job["job_file"] == {"name": "job.yaml", "content": JOB_FILE}

    (cli.home / "typo.yaml").write_text(JOB_FILE.replace("gpu_count: 1", "gpu_cuont: 1"))
    typo = cli("apply", "-f", "typo.yaml")
    assert typo.returncode == 2
    assert "typo.yaml:7: compute.gpu_cuont: Unknown field." in typo.stderr
    (cli.home / "bad.yaml").write_text(JOB_FILE.replace("gpu_count: 1", "gpu_count: 3"))
    bad = cli("apply", "-f", "bad.yaml", "--dry-run")
    assert bad.returncode == 2
    assert "bad.yaml:7: compute.gpu_count: " in bad.stderr
    assert Job.objects.filter(organization=compute_org).count() == 1

    rerun = cli(
        "rerun", job_id, "--set", "container.env.SPEED=fast", "--set", "limits.max_cost_usd=3"
    )

    assert rerun.returncode == 0, rerun.stderr
    again = cli.json("jobs", "get", rerun.stdout.strip())
    assert again["rerun_of"] == job_id
    assert again["container"]["env"] == {"SPEED": "fast"}
    assert again["limits"]["max_cost_usd"] == 3.0
    assert again["job_file"] is None
    assert cli.json("jobs", "get", job_id)["reruns"] == [again["id"]]
    shown = cli("jobs", "get", job_id).stdout
    assert again["id"] in shown and "job.yaml" in shown
