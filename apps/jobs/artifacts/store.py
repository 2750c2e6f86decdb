"""Checkpoints and adapters a workload uploads through its runner: storing them, and finding the
one a new attempt resumes from (docs/runner-protocol.md, "Artifacts and resume").

Rules that hold here:

- Files go through Django's storage API (`default_storage`), at
  `artifacts/<job public id>/attempt-<n>/<kind>-<step or "final">.tar.gz`, so a deployment can
  swap the filesystem for an object store without touching this module.
- `artifact_store` is idempotent on (job, attempt, kind, step): the database holds the
  uniqueness (two partial UniqueConstraints on `Artifact`), so even two identical uploads
  racing each other leave one row and one file.
- The body is streamed, never held whole: the SHA-256 is computed while the bytes go to
  storage, and a mismatch deletes what was written before anything refers to it.
- An artifact may be at most `settings.ARTIFACT_MAX_BYTES`. The upload endpoint refuses a
  larger announced Content-Length before reading; here the bytes are counted as they
  stream (a chunked body announces nothing), and the first byte past the limit ends the
  read: what was stored is deleted, no row is written, and `artifact_refused` says why.
- Artifacts count against the organization's storage quota (apps.accounts.storage): an
  upload that cannot fit (by its announced size, or once the quota is used up) is refused
  before its body is read, one whose bytes pass the room left is cut off as they stream,
  and the last check runs under the organization's row lock with the row's insert: 413
  `quota_exceeded` (recorded on the job like ARTIFACT_MAX_BYTES; the runner gives it up).
- A job may hold at most `MAX_ARTIFACTS_PER_JOB` artifacts (all attempts together): past it
  a new upload is refused before its body is read (413 `too_many_artifacts`; the runner
  gives a 413 up at once and says so in the job's log). A repeat of a stored one still
  answers with it.
"""

from __future__ import annotations

import hashlib
import re
from typing import IO, TypedDict

from django.conf import settings
from django.core.files.base import File
from django.core.files.storage import default_storage
from django.db import IntegrityError, transaction
from django.urls import reverse

from apps.accounts import storage
from apps.core.errors import InvalidRequest, PayloadTooLarge
from apps.jobs import services
from apps.jobs.events import JobEventType
from apps.jobs.models import Artifact, Attempt, Job

CHUNK_BYTES = 1024 * 1024
# Artifacts one job may hold, every attempt together. A setting of the same name overrides it.
MAX_ARTIFACTS_PER_JOB = 200
SHA256_RE = re.compile(r"[0-9a-f]{64}")
# `Artifact.step` is a PositiveIntegerField (PostgreSQL `integer`); ids are `bigint`s, and
# outside they go by `art_<n>`, n in ASCII digits (`str.isdigit` would take "²", which
# `int` refuses).
MAX_STEP = 2**31 - 1
MAX_ARTIFACT_PK = 2**63 - 1
PUBLIC_ID_RE = re.compile(r"art_([0-9]{1,19})")

EVENT_TYPES = {
    Artifact.Kind.CHECKPOINT: JobEventType.CHECKPOINT_SAVED,
    Artifact.Kind.ADAPTER: JobEventType.ADAPTER_UPLOADED,
    Artifact.Kind.MERGED: JobEventType.MERGED_UPLOADED,
}


class Sha256Mismatch(InvalidRequest):
    error_type = "sha256_mismatch"
    default_detail = "The body's SHA-256 is not the one announced."


def public_artifact_id(artifact: Artifact) -> str:
    """The id an artifact goes by outside (the compute API's `art_<n>` too)."""
    return f"art_{artifact.pk}"


def artifact_pk(public_id: str, param: str = "artifact_id") -> int:
    """The primary key an `art_<n>` id names; InvalidRequest (400, naming `param`) when it is
    not one. Whether such an artifact exists (or is the caller's) is the caller's lookup."""
    match = PUBLIC_ID_RE.fullmatch(public_id)
    if match is None or int(match.group(1)) > MAX_ARTIFACT_PK:
        raise InvalidRequest("An artifact id is art_ and a whole number.", param=param)
    return int(match.group(1))


def artifact_storage_path(*, job: Job, attempt: int, kind: str, step: int | None) -> str:
    label = "final" if step is None else str(step)
    return f"artifacts/{job.public_id}/attempt-{attempt}/{kind}-{label}.tar.gz"


def validate_artifact_key(*, kind: object, step: object, sha256: object) -> None:
    """Raise InvalidRequest (400) unless kind, step and sha256 make a storable artifact: a
    checkpoint needs a step; an adapter may have one (the final adapter has none)."""
    if kind not in Artifact.Kind.values:
        raise InvalidRequest("kind must be checkpoint, adapter or merged.", param="kind")
    if step is not None and (
        isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= MAX_STEP
    ):
        raise InvalidRequest(f"step must be a whole number from 0 to {MAX_STEP}.", param="step")
    if kind == Artifact.Kind.CHECKPOINT and step is None:
        raise InvalidRequest("A checkpoint needs its step.", param="step")
    if not isinstance(sha256, str) or not SHA256_RE.fullmatch(sha256):
        raise InvalidRequest(
            "X-Trainyard-SHA256 must be 64 lowercase hex digits.", param="X-Trainyard-SHA256"
        )


def artifact_find(*, attempt: Attempt, kind: str, step: int | None) -> Artifact | None:
    """The artifact already stored under this key, if any."""
    return Artifact.objects.filter(
        job_id=attempt.job_id, attempt=attempt.number, kind=kind, step=step
    ).first()


def artifact_max_bytes() -> int:
    return settings.ARTIFACT_MAX_BYTES


class ArtifactTooLarge(PayloadTooLarge):
    default_detail = "The artifact is larger than this control plane accepts."


class TooManyArtifacts(PayloadTooLarge):
    """413, like ArtifactTooLarge, so a runner gives the upload up at once (it retries a 409
    of a type it does not know)."""

    error_type = "too_many_artifacts"
    default_detail = "The job holds as many artifacts as it may."


def artifact_max_per_job() -> int:
    return getattr(settings, "MAX_ARTIFACTS_PER_JOB", MAX_ARTIFACTS_PER_JOB)


def check_artifact_room(job_id: int) -> None:
    """Raise TooManyArtifacts when the job already holds `artifact_max_per_job()`."""
    cap = artifact_max_per_job()
    if Artifact.objects.filter(job_id=job_id).count() >= cap:
        raise TooManyArtifacts(
            f"The job already holds {cap} artifacts, the most it may; this one was not stored."
        )


def _human_bytes(size: int) -> str:
    """`5.0 GiB (5,368,709,120 bytes)`: rounded for reading, exact for comparing."""
    if size < 1024:
        return f"{size} bytes"
    scaled, unit = float(size), "bytes"
    for unit in ("KiB", "MiB", "GiB"):  # noqa: B007 - the last unit is used after the loop
        scaled /= 1024
        if scaled < 1024:
            break
    return f"{scaled:.1f} {unit} ({size:,} bytes)"


def artifact_refuse(
    *, attempt: Attempt, kind: str, step: int | None, size: int | None = None
) -> ArtifactTooLarge:
    """Record on the job that an upload over the limit was refused (an `artifact_refused`
    event and a system log line) and return the error to raise. `size` is the announced or
    counted size; None when only "more than the limit" is known."""
    limit = artifact_max_bytes()
    what = kind if step is None else f"{kind} at step {step}"
    size_text = "it" if size is None else _human_bytes(size)
    message = (
        f"The {what} was refused: {size_text} is over the ARTIFACT_MAX_BYTES limit of "
        f"{_human_bytes(limit)}."
    )
    _record_refusal(
        attempt, message, {"kind": kind, "step": step, "size_bytes": size, "limit_bytes": limit}
    )
    return ArtifactTooLarge(message, param="Content-Length")


def artifact_refuse_quota(
    *, attempt: Attempt, kind: str, step: int | None, size: int | None
) -> storage.QuotaExceeded:
    """The QuotaExceeded to raise for an upload that does not fit in the organization's
    storage quota (`size` None: more than the room left), recorded on the job as
    `artifact_refused` and a system log line, like an upload over ARTIFACT_MAX_BYTES."""
    organization = attempt.job.organization
    usage = storage.storage_usage(organization)
    adding = size if size is not None else (usage.room_bytes or 0) + 1
    try:
        storage.check_room(organization, adding, what=kind, param="Content-Length")
    except storage.QuotaExceeded as error:
        refusal = error
    else:  # room was made meanwhile; refuse this upload all the same, it was not read
        refusal = storage.QuotaExceeded(param="Content-Length")
    message = str(refusal.detail)
    _record_refusal(
        attempt,
        message,
        {
            "kind": kind,
            "step": step,
            "size_bytes": size,
            "quota_bytes": usage.quota_bytes,
            "used_bytes": usage.used_bytes,
        },
    )
    return refusal


def _record_refusal(attempt: Attempt, message: str, data: dict) -> None:
    """An upload refused before it was read, on the job: an `artifact_refused` event and a
    system line saying why."""
    with transaction.atomic():
        services.record_event(
            job=attempt.job,
            attempt=attempt.number,
            type=JobEventType.ARTIFACT_REFUSED,
            message=message,
            data=data,
        )
        services.system_log(job=attempt.job, attempt=attempt.number, message=message)


def _quota_room(attempt: Attempt) -> int | None:
    return storage.storage_usage(attempt.job.organization).room_bytes


class _HashingReader:
    """Reads `fileobj` for the storage backend, hashing and counting on the way. Past
    `limit` bytes it reports end of file and sets `too_large`, so the storage stops writing."""

    # What storage backends ask a file they were handed (django-storages' S3 does).
    closed = False

    def __init__(self, fileobj: IO[bytes], limit: int) -> None:
        self._fileobj = fileobj
        self._limit = limit
        self.digest = hashlib.sha256()
        self.size = 0
        self.too_large = False

    def seekable(self) -> bool:
        return False

    def read(self, size: int = -1) -> bytes:
        if self.too_large:
            return b""
        data = self._fileobj.read(size if size and size > 0 else CHUNK_BYTES)
        if self.size + len(data) > self._limit:
            self.too_large = True
            return b""
        self.digest.update(data)
        self.size += len(data)
        return data


class _StreamFile(File):
    """A `File` over a stream that cannot seek (a request body). `File.chunks()` reads until
    EOF; `size` is only known afterwards, and no storage backend needs it before."""

    @property
    def size(self) -> int:  # type: ignore[override]
        return self.file.size

    def chunks(self, chunk_size: int | None = None):
        while data := self.file.read(chunk_size or CHUNK_BYTES):
            yield data


def artifact_store(
    *,
    attempt: Attempt,
    kind: str,
    step: int | None,
    fileobj: IO[bytes],
    sha256: str,
    announced: int | None = None,
) -> Artifact:
    """Store an uploaded tar.gz as the attempt's artifact and record its event.

    `fileobj` is read to EOF in chunks (a request, or any binary file). Returns the stored
    Artifact; when one already exists for (job, attempt, kind, step) it is returned as it is
    and `fileobj` is not read (a retried upload stores nothing twice, even with other bytes).
    Raises InvalidRequest for a bad key, TooManyArtifacts when the job holds
    MAX_ARTIFACTS_PER_JOB already (before anything is read), Sha256Mismatch when the bytes
    do not hash to `sha256`, ArtifactTooLarge past ARTIFACT_MAX_BYTES and QuotaExceeded
    past the organization's storage quota (`announced`, the body's Content-Length when
    known, is judged before reading; both recorded on the job): then nothing is stored
    (what was streamed is deleted again).

    The file is written before its row: a process that dies between the two leaves a file
    no row names (the next upload of that key picks a free name beside it), never a row
    without a file. Concurrent duplicates both write; the database lets one row in and the
    loser deletes its file and returns the winner.
    """
    validate_artifact_key(kind=kind, step=step, sha256=sha256)
    existing = artifact_find(attempt=attempt, kind=kind, step=step)
    if existing is not None:
        return existing
    check_artifact_room(attempt.job_id)
    job = attempt.job
    room = _quota_room(attempt)
    if room is not None and (room == 0 or (announced is not None and announced > room)):
        raise artifact_refuse_quota(attempt=attempt, kind=kind, step=step, size=announced)
    limit = artifact_max_bytes() if room is None else min(artifact_max_bytes(), room)
    reader = _HashingReader(fileobj, limit)
    path = artifact_storage_path(job=job, attempt=attempt.number, kind=kind, step=step)
    stored_path = default_storage.save(path, _StreamFile(reader, path))
    if reader.too_large:
        default_storage.delete(stored_path)
        if limit < artifact_max_bytes():
            raise artifact_refuse_quota(attempt=attempt, kind=kind, step=step, size=None)
        raise artifact_refuse(attempt=attempt, kind=kind, step=step)
    if reader.digest.hexdigest() != sha256:
        default_storage.delete(stored_path)
        raise Sha256Mismatch(
            f"The body hashes to {reader.digest.hexdigest()}, not {sha256}.",
            param="X-Trainyard-SHA256",
        )
    try:
        with transaction.atomic():
            storage.lock_for_storage(job.organization)
            storage.check_room(job.organization, reader.size, what=kind, param="Content-Length")
            artifact = Artifact.objects.create(
                job=job,
                attempt=attempt.number,
                kind=kind,
                step=step,
                size_bytes=reader.size,
                sha256=sha256,
                storage_path=stored_path,
            )
            _record(job, attempt, artifact)
    except storage.QuotaExceeded:
        default_storage.delete(stored_path)
        raise artifact_refuse_quota(
            attempt=attempt, kind=kind, step=step, size=reader.size
        ) from None
    except IntegrityError:
        winner = artifact_find(attempt=attempt, kind=kind, step=step)
        # An object store cannot create a name exclusively: two racing uploads may both
        # have written the winner's name. Never delete the file the winner's row names.
        if winner is None or winner.storage_path != stored_path:
            default_storage.delete(stored_path)
        if winner is None:
            raise
        return winner
    return artifact


def _record(job: Job, attempt: Attempt, artifact: Artifact) -> None:
    if artifact.kind == Artifact.Kind.CHECKPOINT:
        message = f"Checkpoint at step {artifact.step} saved ({artifact.size_bytes} bytes)."
    elif artifact.kind == Artifact.Kind.MERGED:
        message = f"Merged weights uploaded ({artifact.size_bytes} bytes)."
    else:
        what = "Final adapter" if artifact.step is None else f"Adapter at step {artifact.step}"
        message = f"{what} uploaded ({artifact.size_bytes} bytes)."
    services.record_event(
        job=job,
        attempt=attempt.number,
        type=EVENT_TYPES[artifact.kind],
        message=message,
        data={
            "artifact_id": public_artifact_id(artifact),
            "kind": artifact.kind,
            "step": artifact.step,
            "size_bytes": artifact.size_bytes,
            "sha256": artifact.sha256,
        },
    )


def newest_checkpoint(job: Job) -> Artifact | None:
    """The checkpoint a new attempt resumes from: of any attempt of the job (an earlier one,
    or this one when its runner was relaunched), the highest step, then the latest stored."""
    return (
        Artifact.objects.filter(job=job, kind=Artifact.Kind.CHECKPOINT, step__isnull=False)
        .order_by("-step", "-id")
        .first()
    )


class ResumeFrom(TypedDict):
    artifact_id: str
    step: int
    sha256: str
    download_url: str


def resume_from(job: Job) -> ResumeFrom | None:
    """The spec's `resume_from`: the newest checkpoint and where the runner downloads it."""
    checkpoint = newest_checkpoint(job)
    if checkpoint is None:
        return None
    return {
        "artifact_id": public_artifact_id(checkpoint),
        "step": checkpoint.step,
        "sha256": checkpoint.sha256,
        "download_url": reverse(
            "runner-artifact-download",
            kwargs={"job_id": job.public_id, "artifact_id": checkpoint.pk},
        ),
    }


def artifact_for_job(job: Job, artifact_id: int) -> Artifact | None:
    """One of the job's artifacts (another job's is None, as if it did not exist)."""
    if not 0 < artifact_id <= MAX_ARTIFACT_PK:
        return None
    return Artifact.objects.filter(job=job, pk=artifact_id).first()
