"""A completed fine-tune as the serving tests need it: a `succeeded` fine-tune job on the
tiny model whose final adapter and a checkpoint are stored artifacts (real tar.gz packs of
adapters the real trainer made, `tests/adapters.py`), so endpoints and the Playground can
serve them. The training itself is tested in tests/trainer and tests/integration; here it
is the input."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from django.core.files.storage import default_storage
from django.utils import timezone

from apps.finetunes import payloads
from apps.jobs.artifacts.store import artifact_storage_path
from apps.jobs.models import Artifact, Job
from apps.jobs.states import JobState
from runner.artifacts import pack_directory


@dataclass
class FinishedFinetune:
    job: Job
    adapter: Artifact
    checkpoint: Artifact


def store_artifact(job: Job, directory: Path, kind: str, step: int | None) -> Artifact:
    with tempfile.TemporaryDirectory() as scratch:
        packed = pack_directory(directory, Path(scratch) / "artifact.tar.gz")
        path = artifact_storage_path(job=job, attempt=1, kind=kind, step=step)
        with open(packed.path, "rb") as handle:
            stored = default_storage.save(path, handle)
    return Artifact.objects.create(
        job=job,
        attempt=1,
        kind=kind,
        step=step,
        size_bytes=packed.size,
        sha256=packed.sha256,
        storage_path=stored,
    )


def succeeded_finetune_job(project, *, name: str, config: dict) -> Job:
    """The row of a fine-tune of `project` that succeeded (attempt 1, exit 0), as the trainer
    would have run it with `config`; no artifacts."""
    payload = payloads.job_payload(name=name, project_id=project.public_id, config=config)
    now = timezone.now()
    return Job.objects.create(
        organization=project.organization,
        project=project,
        name=name,
        kind=Job.Kind.FINETUNE,
        spec={"container": payload["container"], "compute": payload["compute"]},
        accelerator="cpu",
        gpu_count=1,
        ephemeral_disk_gb=20,
        state=JobState.SUCCEEDED,
        attempt_count=1,
        exit_code=0,
        started_at=now,
        terminal_at=now,
    )


def finished_finetune(
    *,
    project,
    tiny_model: Path,
    adapter_dir: Path,
    checkpoint_dir: Path | None = None,
    name: str = "tuned",
) -> FinishedFinetune:
    """A succeeded fine-tune of `project` on `tiny_model` whose final adapter is
    `adapter_dir` (and a checkpoint at step 2, `checkpoint_dir` or the adapter again)."""
    config = {
        "model": str(tiny_model),
        "dataset": "demo",
        "dataset_format": "alpaca",
        "max_samples": None,
        "max_steps": 4,
        "learning_rate": 2e-4,
        "seed": 42,
        "save_steps": 2,
    }
    job = succeeded_finetune_job(project, name=name, config=config)
    checkpoint = store_artifact(job, checkpoint_dir or adapter_dir, Artifact.Kind.CHECKPOINT, 2)
    adapter = store_artifact(job, adapter_dir, Artifact.Kind.ADAPTER, None)
    return FinishedFinetune(job=job, adapter=adapter, checkpoint=checkpoint)
