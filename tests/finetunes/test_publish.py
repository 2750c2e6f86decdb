"""A succeeded fine-tune's adapter and checkpoints published as a model repository of its
organization's hub (apps.finetunes.publish), from the artifacts the runner uploaded."""

from __future__ import annotations

import hashlib
import io
import tarfile

import pytest

from apps.finetunes import payloads, publish
from apps.hub import repos
from apps.hub.models import HubCommit, HubRepo, RefKind
from apps.jobs import services
from apps.jobs.artifacts import store
from apps.jobs.events import JobEventType
from apps.jobs.execution import dispatch
from apps.jobs.models import Job, JobEvent
from apps.jobs.states import JobState
from tests.jobs.helpers import make_job

pytestmark = pytest.mark.django_db

CONFIG = {
    "model": "acme/tiny@v1",
    "dataset": "acme/greetings",
    "dataset_format": "alpaca",
    "max_samples": None,
    "max_steps": 20,
    "learning_rate": 0.0002,
}


@pytest.fixture(autouse=True)
def media(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path / "media"


def _tar(files: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _finetune(org, name="Support bot v2", project=None) -> tuple[Job, object]:
    body = payloads.job_payload(
        name=name, project_id=project.public_id if project else "", config=CONFIG
    )
    if project is None:
        body.pop("project")
    job = make_job(org, **body)
    Job.objects.filter(pk=job.pk).update(kind=Job.Kind.FINETUNE)
    attempt = dispatch.allocate(job.pk)
    return Job.objects.get(pk=job.pk), attempt


def _upload(attempt, kind: str, step: int | None, files: dict[str, bytes]) -> None:
    body = _tar(files)
    store.artifact_store(
        attempt=attempt,
        kind=kind,
        step=step,
        fileobj=io.BytesIO(body),
        sha256=hashlib.sha256(body).hexdigest(),
    )


def _trained(org, name="Support bot v2", project=None) -> Job:
    job, attempt = _finetune(org, name, project)
    for step in (10, 20):
        _upload(
            attempt,
            "checkpoint",
            step,
            {
                "adapter_config.json": b'{"r": 8}',
                "adapter_model.safetensors": f"weights at {step}".encode(),
                "optimizer.pt": b"resume state",
                "rng_state.pth": b"resume state",
            },
        )
    _upload(
        attempt,
        "adapter",
        None,
        {
            "adapter_config.json": b'{"r": 8}',
            "adapter_model.safetensors": b"final weights",
            "tokenizer.json": b"{}",
        },
    )
    services.record_event(
        job=job,
        type=JobEventType.GRADING,
        data={"eval_loss_before": 2.5, "eval_loss_after": 1.25, "passed": True},
    )
    return job


def _files(repo: HubRepo, revision: str) -> dict[str, bytes]:
    from apps.hub.blobs import open_blob

    commit = repos.resolve(repo, revision)
    return {f.path: open_blob(f.blob).read() for f in repos.tree(commit)}


def test_the_final_adapter_is_main_with_a_model_card_and_each_checkpoint_a_tag(org):
    job = _trained(org)

    repo = publish.publish_adapter(job)

    assert repo.repo_id == "acme/Support-bot-v2"
    assert repo.source_job_id == job.pk
    final = _files(repo, "main")
    assert final["adapter_model.safetensors"] == b"final weights"
    assert set(final) == {
        "README.md",
        "adapter_config.json",
        "adapter_model.safetensors",
        "tokenizer.json",
    }
    card = final["README.md"].decode()
    assert card.startswith("---\nlibrary_name: peft\n")
    assert "base_model: acme/tiny\n" in card
    assert "datasets:\n- acme/greetings\n" in card
    assert "| Held-out loss | 2.5 before, 1.25 after |" in card
    assert "| Steps | 20 |" in card
    assert f"`{job.public_id}`" in card
    # Checkpoints: their adapter as it was, without what only resumes training.
    assert _files(repo, "step-10") == {
        "adapter_config.json": b'{"r": 8}',
        "adapter_model.safetensors": b"weights at 10",
    }
    assert _files(repo, "step-20")["adapter_model.safetensors"] == b"weights at 20"
    assert repos.resolve(repo, "final") == repos.resolve(repo, "main")
    tags = set(repos.refs(repo).filter(kind=RefKind.TAG).values_list("name", flat=True))
    assert tags == {"step-10", "step-20", "final"}
    event = JobEvent.objects.get(job=job, type=JobEventType.PUBLISHED_TO_HUB)
    assert event.data["repo_id"] == "acme/Support-bot-v2"
    assert event.data["url"] == "/o/acme/models/Support-bot-v2/"
    assert event.data["tags"] == ["final", "step-10", "step-20"]


def test_publishing_twice_commits_nothing_more(org):
    job = _trained(org)
    repo = publish.publish_adapter(job)
    commits = HubCommit.objects.filter(repo=repo).count()

    again = publish.publish_adapter(job)

    assert again.pk == repo.pk
    assert HubCommit.objects.filter(repo=repo).count() == commits == 4  # initial, 2 steps, final
    assert JobEvent.objects.filter(job=job, type=JobEventType.PUBLISHED_TO_HUB).count() == 1


def test_a_name_taken_by_another_repository_gets_the_job_s_id(org):
    repos.create_repo(org, "model", "Support-bot-v2")
    job = _trained(org)

    repo = publish.publish_adapter(job)

    assert repo.name == f"Support-bot-v2-{job.public_id}"


@pytest.mark.parametrize(
    ("job_name", "repo_name"),
    [
        ("my run (lr=2e-4)", "my-run-lr-2e-4"),
        ("--..--", "finetune"),
        ("a..b--c.git", "a.b-c"),
        ("x" * 200, "x" * 80),
    ],
)
def test_a_job_name_becomes_a_repository_name(job_name, repo_name):
    assert publish.repo_name_for(job_name) == repo_name


def test_over_the_storage_quota_the_job_says_so_and_still_succeeded(org):
    job = _trained(org)
    org.storage_quota_bytes = 1  # the artifacts are in; the hub's copies do not fit
    org.save(update_fields=["storage_quota_bytes"])
    for step in (JobState.PROVISIONING, JobState.RUNNING, JobState.FINALIZING):
        services.job_transition(job_id=job.pk, to=step)
    services.job_transition(job_id=job.pk, to=JobState.SUCCEEDED)

    assert publish.publish_adapter(job) is None

    failed = JobEvent.objects.get(job=job, type=JobEventType.PUBLISH_FAILED)
    assert "not published to the hub" in failed.message
    assert "quota" in failed.message.lower()
    assert Job.objects.get(pk=job.pk).state == JobState.SUCCEEDED


def test_a_job_without_a_final_adapter_publishes_nothing(org):
    job, attempt = _finetune(org)
    _upload(attempt, "checkpoint", 10, {"adapter_model.safetensors": b"w"})

    assert publish.publish_adapter(job) is None
    assert not HubRepo.objects.filter(organization=org).exists()


def test_an_archive_member_with_an_unsafe_path_is_left_out(org):
    job, attempt = _finetune(org)
    _upload(
        attempt,
        "adapter",
        None,
        {"adapter_model.safetensors": b"w", "../escape": b"x", "/abs": b"y", "a/./b": b"z"},
    )

    repo = publish.publish_adapter(job)

    assert set(_files(repo, "main")) == {"README.md", "adapter_model.safetensors"}


def test_the_job_page_links_the_published_repository_or_says_why_not(
    client_for, member, org, project
):
    job = _trained(org, project=project)
    publish.publish_adapter(job)
    page = client_for(member).get(f"/o/acme/jobs/{job.public_id}/").content.decode()
    assert 'Published to the hub as\n        <a href="/o/acme/models/Support-bot-v2/">' in page
    assert "(tags final, step-10, step-20)" in page

    broken, attempt = _finetune(org, "broken", project)
    store.artifact_store(
        attempt=attempt,
        kind="adapter",
        step=None,
        fileobj=io.BytesIO(b"not a tar.gz"),
        sha256=hashlib.sha256(b"not a tar.gz").hexdigest(),
    )
    assert publish.publish_adapter(broken) is None
    page = client_for(member).get(f"/o/acme/jobs/{broken.public_id}/").content.decode()
    assert "The adapter was not published to the hub:" in page


def test_merged_weights_asked_for_go_under_merged_in_the_final_commit(org):
    job = _trained(org)
    attempt = job.attempts.get()
    _upload(
        attempt,
        "merged",
        None,
        {"config.json": b'{"model_type": "llama"}', "model.safetensors": b"merged weights"},
    )

    repo = publish.publish_adapter(job)

    final = _files(repo, "final")
    assert final["merged/model.safetensors"] == b"merged weights"
    assert final["adapter_model.safetensors"] == b"final weights"  # the adapter stays on top
    assert 'subfolder="merged"' in final["README.md"].decode()
    assert "merged/config.json" not in _files(repo, "step-20")
