"""A succeeded fine-tune's adapter, published as a model repository of its organization's hub.

What a user gets, without asking: `<org>/<name>` (the job's name made a repository name;
`-<job id>` appended when another repository has it) whose `main` holds the final adapter
(`adapter_config.json`, `adapter_model.safetensors`, the tokenizer) and a model card
(`README.md`: base model, data, steps, learning rate, held-out loss before and after); a
fine-tune asked to `merge` also has the merged weights of that attempt under `merged/`.
Each checkpoint the job saved comes first, as a commit of its adapter files tagged
`step-<n>`, and the final commit is tagged `final`, so `<org>/<name>@step-20` names the
adapter as it was at step 20. A checkpoint's optimizer, scheduler and RNG state are left
out: they resume the job (its artifacts keep them), they do not serve.

Publishing runs in a worker after the job succeeded (`apps.jobs.tasks.job_succeeded`) and
is safe to repeat: a second run finds the repository by its job and each tag in place, and
commits nothing again; two at once are kept apart by a lease. A failure (the organization's
storage quota, an archive that cannot be read) is recorded on the job as `publish_failed`
with the reason, and never changes the job's outcome.
"""

from __future__ import annotations

import hashlib
import logging
import re
import tarfile
import tempfile
from contextlib import closing
from dataclasses import dataclass

from django.db import transaction
from django.urls import reverse

from apps.core import leases
from apps.core.errors import ApiError
from apps.core.stored_files import StoredFileMissing, open_stream
from apps.finetunes import payloads
from apps.hub import blobs, repos
from apps.hub.errors import RepoExists
from apps.hub.models import HubBlob, HubRepo, RefKind, RepoKind
from apps.hub.names import DEFAULT_BRANCH, path_problem, repo_name_problem
from apps.jobs import services
from apps.jobs.events import JobEventType
from apps.jobs.models import Artifact, Job, JobEvent

log = logging.getLogger(__name__)

FINAL_TAG = "final"
MERGED_FOLDER = "merged"
AUTHOR = "trainyard"
# What a checkpoint holds only to resume training: not published.
RESUME_ONLY = re.compile(
    r"(^|/)(optimizer\.pt|scheduler\.pt|scaler\.pt|rng_state(_\d+)?\.pth|training_args\.bin)$"
)
SPOOL_BYTES = 16 * 1024 * 1024


def step_tag(step: int) -> str:
    return f"step-{step}"


def publish_adapter(job: Job) -> HubRepo | None:
    """Publish `job`'s checkpoints and final adapter (see the module's docstring); the
    repository, or None when there is nothing to publish or another worker is at it."""
    final = (
        Artifact.objects.filter(job=job, kind=Artifact.Kind.ADAPTER, step__isnull=True)
        .order_by("-attempt")
        .first()
    )
    if final is None:
        return None
    with leases.lease(leases.HUB_PUBLISH, job.pk) as held:
        if not held:
            return None
        try:
            return _publish(job, final)
        except (ApiError, StoredFileMissing, tarfile.TarError, OSError, EOFError) as exc:
            log.warning("publishing job %s to the hub failed: %s", job.public_id, exc)
            _record(
                job,
                JobEventType.PUBLISH_FAILED,
                f"The adapter was not published to the hub: {exc}",
                {"reason": str(exc)},
            )
            return None


def _publish(job: Job, final: Artifact) -> HubRepo:
    repo = _repo_for(job)
    done = set(repos.refs(repo).filter(kind=RefKind.TAG).values_list("name", flat=True))
    if FINAL_TAG in done:
        return repo
    for checkpoint in _checkpoints(job):
        tag = step_tag(checkpoint.step)
        if tag not in done:
            files = _adapter_files(job, checkpoint)
            _commit_and_tag(repo, files, f"Checkpoint at step {checkpoint.step}", tag)
    files = _adapter_files(job, final)
    merged = (
        Artifact.objects.filter(job=job, kind=Artifact.Kind.MERGED, attempt=final.attempt)
        .order_by("-id")
        .first()
    )
    if merged is not None:
        files.update(
            {f"{MERGED_FOLDER}/{path}": blob for path, blob in _adapter_files(job, merged).items()}
        )
    card = model_card(job, repo, merged=merged is not None)
    files["README.md"] = blobs.store_bytes(job.organization, card.encode())
    commit = _commit_and_tag(repo, files, "Final adapter", FINAL_TAG)
    _record(
        job,
        JobEventType.PUBLISHED_TO_HUB,
        f"Adapter published to the hub as {repo.repo_id}.",
        {
            "repo_id": repo.repo_id,
            "revision": commit.oid,
            "url": reverse(
                "hub-repo",
                kwargs={"org_slug": job.organization.slug, "section": "models", "name": repo.name},
            ),
            "tags": sorted({*done, FINAL_TAG, *(step_tag(c.step) for c in _checkpoints(job))}),
        },
    )
    return repo


def _repo_for(job: Job) -> HubRepo:
    existing = HubRepo.objects.select_related("organization").filter(source_job=job).first()
    if existing is not None:
        return existing
    name = repo_name_for(job.name)
    for candidate in (name, f"{name[: 96 - len(job.public_id) - 1]}-{job.public_id}"):
        try:
            with transaction.atomic():
                repo = repos.create_repo(job.organization, RepoKind.MODEL, candidate)
                HubRepo.objects.filter(pk=repo.pk).update(source_job=job)
                repo.source_job = job
                return repo
        except RepoExists:
            continue
    raise RepoExists(f"{job.organization.slug}/{name} exists already.")


def repo_name_for(job_name: str) -> str:
    """The job's name as a repository name: runs of other characters become `-`."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", job_name)
    name = re.sub(r"-{2,}", "-", re.sub(r"\.{2,}", ".", name)).strip("-._")[:80]
    name = name.strip("-.")
    if name.endswith(".git"):
        name = name[:-4].strip("-.")
    return name if name and repo_name_problem(name) is None else "finetune"


def _checkpoints(job: Job) -> list[Artifact]:
    """The job's checkpoints by step; for a step saved by two attempts, the later one's."""
    by_step: dict[int, Artifact] = {}
    for artifact in Artifact.objects.filter(
        job=job, kind=Artifact.Kind.CHECKPOINT, step__isnull=False
    ).order_by("step", "attempt"):
        by_step[artifact.step] = artifact
    return list(by_step.values())


def _adapter_files(job: Job, artifact: Artifact) -> dict[str, HubBlob]:
    """The artifact's files (its tar.gz, read as a stream) stored as the organization's hub
    blobs, by path; only regular files with paths the hub accepts, resume state left out."""
    files: dict[str, HubBlob] = {}
    with (
        closing(open_stream(artifact.storage_path)) as raw,
        tarfile.open(fileobj=raw, mode="r|gz") as archive,
    ):
        for member in archive:
            path = member.name.removeprefix("./")
            if not member.isfile() or path_problem(path) or RESUME_ONLY.search(path):
                continue
            source = archive.extractfile(member)
            if source is not None:
                files[path] = _store(job, source, member.size)
    return files


def _store(job: Job, source, size: int) -> HubBlob:
    digest = hashlib.sha256()
    with tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES) as spool:
        while chunk := source.read(1024 * 1024):
            digest.update(chunk)
            spool.write(chunk)
        spool.seek(0)
        return blobs.store_blob(
            job.organization, spool, sha256=digest.hexdigest(), size=size, what="adapter"
        )


def _commit_and_tag(repo: HubRepo, files: dict[str, HubBlob], summary: str, tag: str):
    """Make `main` hold exactly `files` (a checkpoint's tree replaces the one before) and
    tag that commit."""
    with transaction.atomic():
        head = repos.resolve(repo, DEFAULT_BRANCH)
        stale = tuple(
            path for path in repos.tree(head).values_list("path", flat=True) if path not in files
        )
        changes = repos.Changes(additions=files, deleted_files=stale)
        commit = repos.commit(
            repo, branch=DEFAULT_BRANCH, changes=changes, summary=summary, author=AUTHOR
        )
        repos.create_ref(repo, RefKind.TAG, tag, commit, exist_ok=True)
    return commit


@dataclass(frozen=True)
class _Loss:
    before: float | None
    after: float | None


def _held_out_loss(job: Job) -> _Loss:
    event = JobEvent.objects.filter(job=job, type=JobEventType.GRADING).order_by("-id").first()
    data = event.data if event is not None else {}
    return _Loss(data.get("eval_loss_before"), data.get("eval_loss_after"))


def _is_hub_id(value: object) -> bool:
    return (
        isinstance(value, str) and value.count("/") == 1 and not value.startswith(("/", ".", "~"))
    )


def model_card(job: Job, repo: HubRepo, *, merged: bool = False) -> str:
    """The README the hub shows: YAML metadata the Hugging Face tools read, then what the
    adapter was trained from and how far."""
    config = payloads.config_of(job) or {}
    model, dataset = config.get("model", ""), config.get("dataset", "")
    loss = _held_out_loss(job)
    meta = ["---", "library_name: peft", "tags:", "- trainyard", "- lora"]
    if _is_hub_id(model):
        meta.append(f"base_model: {model.split('@', 1)[0]}")
    if _is_hub_id(dataset):
        meta += ["datasets:", f"- {dataset.split('@', 1)[0]}"]
    meta.append("---")
    rows = [
        ("Base model", model),
        ("Data", f"{dataset} ({config.get('dataset_format', 'as uploaded')})"),
        ("Samples", config.get("max_samples") or "all"),
        ("Steps", config.get("max_steps") or "one epoch"),
        ("Learning rate", config.get("learning_rate")),
        ("Held-out loss", _loss_text(loss)),
        ("Trainyard job", job.public_id),
    ]
    table = ["| | |", "| --- | --- |", *(f"| {label} | {value} |" for label, value in rows)]
    body = [
        f"# {repo.name}",
        "",
        f"A LoRA adapter for `{model}`, fine-tuned by Trainyard job `{job.public_id}` "
        f'("{job.name}").',
        "",
        *table,
        "",
        "Each checkpoint is a tag: `step-<n>`; `final` is the adapter the job ended with.",
        "",
    ]
    if merged:
        body += [
            f"`{MERGED_FOLDER}/` holds the base model with this adapter merged in: "
            f'`AutoModelForCausalLM.from_pretrained("{repo.repo_id}", '
            f'subfolder="{MERGED_FOLDER}")`.',
            "",
        ]
    return "\n".join([*meta, "", *body])


def _loss_text(loss: _Loss) -> str:
    if loss.before is None or loss.after is None:
        return "not measured"
    return f"{loss.before:.4g} before, {loss.after:.4g} after"


def _record(job: Job, type: str, message: str, data: dict) -> None:
    with transaction.atomic():
        services.record_event(job=job, type=type, message=message, data=data)
