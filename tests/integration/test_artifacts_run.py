"""Artifacts for real: a workload's checkpoint and adapter lines → the runner packs and uploads
the directories → the web server stores them → Artifacts and events; and a second attempt of a
job gets the newest checkpoint of the first one back, extracted, before its workload starts."""

from __future__ import annotations

import base64
import hashlib
import io
import tarfile
import uuid
from pathlib import Path

import pytest
from django.db import transaction

from apps.jobs import services
from apps.jobs.artifacts import store
from apps.jobs.execution import attempts, dispatch
from apps.jobs.models import Artifact, Job, LogLine
from apps.jobs.states import JobState
from tests.integration.conftest import TERMINAL

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


def _media_root(stack) -> Path:
    """Where the stack's web server stores files (its MEDIA_ROOT)."""
    env = stack.env()
    return Path(env.get("MEDIA_ROOT") or Path(env["TRAINYARD_VAR_DIR"]) / "media")


def _members(data: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def _user_lines(job_id: str) -> list[str]:
    return list(
        LogLine.objects.filter(job__public_id=job_id, source="user")
        .order_by("attempt", "seq", "id")
        .values_list("message", flat=True)
    )


SAVES = r"""
set -e
ck="$PWD/$TRAINYARD_CHECKPOINT_DIR"
mkdir -p "$ck/checkpoint-5/sub"
echo "weights at step five" > "$ck/checkpoint-5/model.bin"
echo '{"global_step": 5}' > "$ck/checkpoint-5/sub/trainer_state.json"
echo '{"type": "checkpoint", "step": 5, "path": "'"$ck"'/checkpoint-5"}'
mkdir -p "$ck/adapter"
echo "adapter weights" > "$ck/adapter/adapter_model.safetensors"
echo '{"type": "adapter", "path": "'"$ck"'/adapter"}'
echo "training done"
"""


def test_a_workloads_checkpoint_and_adapter_become_stored_artifacts(api, stack):
    job = api.submit(script_b64=base64.b64encode(SAVES.encode()).decode())

    done = api.wait_state(job["id"], TERMINAL, timeout=60)

    assert done["state"] == "succeeded", _user_lines(job["id"])
    stored = list(Artifact.objects.filter(job__public_id=job["id"]).order_by("id"))
    assert [(a.attempt, a.kind, a.step) for a in stored] == [
        (1, "checkpoint", 5),
        (1, "adapter", None),
    ]
    assert [a.storage_path for a in stored] == [
        f"artifacts/{job['id']}/attempt-1/checkpoint-5.tar.gz",
        f"artifacts/{job['id']}/attempt-1/adapter-final.tar.gz",
    ]
    files = [(_media_root(stack) / a.storage_path).read_bytes() for a in stored]
    for artifact, data in zip(stored, files, strict=True):
        assert artifact.sha256 == hashlib.sha256(data).hexdigest()
        assert artifact.size_bytes == len(data)
    assert _members(files[0]) == {
        "model.bin": b"weights at step five\n",
        "sub/trainer_state.json": b'{"global_step": 5}\n',
    }
    assert _members(files[1]) == {"adapter_model.safetensors": b"adapter weights\n"}

    events = {e["type"]: e for e in api.events(job["id"])}
    assert events["checkpoint_saved"]["data"]["step"] == 5
    assert events["checkpoint_saved"]["data"]["artifact_id"] == f"art_{stored[0].pk}"
    assert events["adapter_uploaded"]["data"]["artifact_id"] == f"art_{stored[1].pk}"
    lines = _user_lines(job["id"])
    assert lines[0].startswith('{"type": "checkpoint", "step": 5, "path": "/')
    assert lines[-1] == "training done"


PRINTS_RESUME = r"""
set -e
echo "attempt $TRAINYARD_ATTEMPT resumes from $TRAINYARD_RESUME_FROM"
cat "$TRAINYARD_RESUME_FROM/trainer_state.json"
"""


def _checkpoint_tar_gz(step: int) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        data = f'{{"global_step": {step}}}\n'.encode()
        info = tarfile.TarInfo("trainer_state.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_a_second_attempt_resumes_from_the_first_attempts_checkpoint(
    api, stack, compute_org, settings
):
    settings.MEDIA_ROOT = _media_root(stack)  # stored here, served by the stack's web server
    archive = _checkpoint_tar_gz(5)
    body = {
        "name": "resumes",
        "compute": {"accelerator": "cpu", "gpu_count": 1, "ephemeral_disk_gb": 1},
        "container": {
            "image": "local",
            "script_b64": base64.b64encode(PRINTS_RESUME.encode()).decode(),
        },
    }
    # One transaction: dispatch (enqueued on commit) finds the job already preempted and
    # re-queued, so attempt 1 never launches and attempt 2 does.
    with transaction.atomic():
        job = services.job_create(
            organization=compute_org, payload=body, idempotency_key=uuid.uuid4().hex
        ).job
        first = dispatch.allocate(job.pk)
        services.job_transition(job_id=job.pk, to=JobState.PROVISIONING)
        store.artifact_store(
            attempt=first,
            kind="checkpoint",
            step=5,
            fileobj=io.BytesIO(archive),
            sha256=hashlib.sha256(archive).hexdigest(),
        )
        services.job_transition(job_id=job.pk, to=JobState.PREEMPTED, reason="reclaimed")
        attempts.end_attempt(first, reason="reclaimed")
        services.job_transition(job_id=job.pk, to=JobState.REQUESTED)

    done = api.wait_state(job.public_id, TERMINAL, timeout=60)

    assert done["state"] == "succeeded", _user_lines(job.public_id)
    assert [a["number"] for a in done["attempts"]] == [1, 2]
    lines = _user_lines(job.public_id)
    assert len(lines) == 2
    assert lines[0].startswith("attempt 2 resumes from /")
    assert lines[0].endswith("/resume/checkpoint-5")
    assert lines[1] == '{"global_step": 5}'
    system = list(
        LogLine.objects.filter(job=job, attempt=2, source="system").values_list(
            "message", flat=True
        )
    )
    assert "resuming from checkpoint at step 5" in system
    assert Job.objects.get(pk=job.pk).attempt_count == 2
