"""Checkpoints and adapters: uploading what the workload saved, and fetching the checkpoint a
resumed attempt starts from (docs/runner-protocol.md, "Artifacts and resume").

**Uploads.** A line of the workload's stdout that is a JSON object
`{"type": "checkpoint", "step": N, "path": "<dir>"}` or `{"type": "adapter", "path": "<dir>"}`
(an adapter may carry a step too) asks for the directory to be uploaded. The line itself is
logged like any other. `ArtifactUploader.offer` is called by the output reader for every
complete stdout line and must stay cheap: only lines that look like such an object are parsed.
The directory must be inside `$TRAINYARD_CHECKPOINT_DIR` once symlinks are resolved (the root
itself does not count); anything else is refused with a system line. One thread works through
the requests in order: pack the directory into `{workdir}/artifact-<n>.tar.gz.tmp` (tar.gz,
paths relative to the directory, entries sorted, gzip time zero, so an unchanged directory
packs to the same bytes), hash it, upload it with retries, delete the temporary file.

Packing happens when the upload's turn comes, not when the line is read: the reader thread
must never block on disk work, or a workload with a full pipe would stall. A workload that
deletes a directory before it was packed (a rotating `save_total_limit` with uploads queued)
loses that upload; the system line says so.

An upload that the control plane refuses (401/404, or 409) is given up with a system line and
does not stop the workload: the log and heartbeat threads decide about the run. The runner
reports `exit` only after every queued upload finished or `final_flush_timeout_s` ran out.

**Resume.** `fetch_resume` downloads the spec's `resume_from` archive, checks its SHA-256 and
extracts it into `{workdir}/resume/checkpoint-<step>/` (through a `.partial` directory, so a
relaunched runner finds either a whole checkpoint or none). Extraction is strict: no absolute
names, no `..`, no devices or fifos, no link (symbolic or hard) that resolves outside the
directory, nothing written through a link; an archive that breaks a rule is not used at all.
"""

from __future__ import annotations

import gzip
import json
import os
import queue
import shutil
import stat
import tarfile
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from runner.client import (
    ClientError,
    ControlClient,
    FatalError,
    RetryableError,
    RetryStopped,
    StopWhen,
    SupersededError,
    log_retry,
    retrying,
)
from runner.files import sha256_of
from runner.protocol import ARTIFACT_LINE_TYPES, ENV_CHECKPOINT_DIR, LINE_CHECKPOINT

# What a line must contain to be worth parsing: one of the types, quoted.
_TYPE_MARKERS = tuple(f'"{kind}"' for kind in sorted(ARTIFACT_LINE_TYPES))
COPY_CHUNK_BYTES = 1024 * 1024
GZIP_LEVEL = 1  # weights barely compress; speed matters more than a few percent
# How long an upload waits for the log lines printed before it to be acknowledged.
LOGS_FIRST_S = 30.0


class LogsBefore(Protocol):
    """What the uploader needs of the log sender (`runner.loops.LogSender`)."""

    def spooled_seq(self) -> int: ...

    def wait_shipped(self, seq: int, timeout: float) -> bool: ...


@dataclass(frozen=True)
class ArtifactRequest:
    kind: str
    step: int | None
    path: str


def parse_artifact_line(text: str) -> ArtifactRequest | None:
    """The upload a stdout line asks for, or None. Cheap for ordinary lines."""
    stripped = text.strip()
    if not (stripped.startswith("{") and '"path"' in stripped):
        return None
    if not any(marker in stripped for marker in _TYPE_MARKERS):
        return None
    try:
        data = json.loads(stripped)
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("type") not in ARTIFACT_LINE_TYPES:
        return None
    path, step = data.get("path"), data.get("step")
    if not isinstance(path, str) or not path:
        return None
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        step = None
    return ArtifactRequest(kind=data["type"], step=step, path=path)


def inside(path: str | Path, root: str | Path) -> bool:
    """True when `path` (symlinks resolved) lies strictly inside `root` (resolved too)."""
    real, base = os.path.realpath(path), os.path.realpath(root)
    return real != base and os.path.commonpath([real, base]) == base


@dataclass(frozen=True)
class Packed:
    path: Path
    sha256: str
    size: int


def pack_directory(directory: str | Path, dest: str | Path) -> Packed:
    """Write `directory` as a tar.gz to `dest`: names relative to the directory, sorted;
    regular files, directories, and symlinks that stay inside it (others are left out)."""
    root = Path(os.path.realpath(directory))
    dest = Path(dest)
    with open(dest, "wb") as raw:
        gz = gzip.GzipFile("", "wb", GZIP_LEVEL, fileobj=raw, mtime=0)  # no name, no time
        with gz, tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for dirpath, dirnames, filenames in os.walk(root):
                dirnames.sort()
                for name in sorted(dirnames + filenames):
                    full = os.path.join(dirpath, name)
                    mode = os.lstat(full).st_mode
                    if stat.S_ISLNK(mode):
                        if not _link_stays_inside(full, root):
                            continue
                    elif not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
                        continue
                    tar.add(full, arcname=os.path.relpath(full, root), recursive=False)
    return Packed(dest, sha256_of(dest), dest.stat().st_size)


def _link_stays_inside(link: str, root: Path) -> bool:
    target = os.path.realpath(link)
    return os.path.commonpath([target, str(root)]) == str(root)


class UnsafeArchive(Exception):
    """The archive breaks an extraction rule; nothing of it is used."""


def _safe_member_name(name: str) -> str:
    """The member's path relative to the destination; "" for the destination itself."""
    if name.startswith("/") or "\\" in name or "\x00" in name:
        raise UnsafeArchive(f"unsafe name {name!r}")
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise UnsafeArchive(f"unsafe name {name!r}")
    return os.path.join(*parts) if parts else ""


def safe_extract(archive: str | Path, dest: str | Path) -> None:
    """Extract a tar.gz into `dest` (created; must not exist) by the rules above. Raises
    UnsafeArchive, tarfile.TarError or OSError; `dest` may then hold part of it."""
    os.makedirs(dest)
    root = os.path.realpath(dest)

    def check_inside(path: str, what: str) -> None:
        real = os.path.realpath(path)
        if real != root and os.path.commonpath([real, root]) != root:
            raise UnsafeArchive(f"{what} leads outside the checkpoint")

    with tarfile.open(archive, mode="r:gz") as tar:
        for member in tar:
            name = _safe_member_name(member.name)
            if not name:
                if member.isdir():  # "./" of `tar -C dir .`
                    continue
                raise UnsafeArchive(f"unsafe name {member.name!r}")
            target = os.path.join(root, name)
            parent = os.path.dirname(target)
            check_inside(parent, f"the folder of {member.name!r}")
            if os.path.lexists(target) and not (member.isdir() and os.path.isdir(target)):
                raise UnsafeArchive(f"{member.name!r} appears twice")
            if member.isdir():
                os.makedirs(target, exist_ok=True)
                check_inside(target, f"{member.name!r}")
            elif member.isfile():
                os.makedirs(parent, exist_ok=True)
                source = tar.extractfile(member)
                assert source is not None
                with source, open(target, "xb") as out:  # "x": never through a link
                    shutil.copyfileobj(source, out, COPY_CHUNK_BYTES)
                os.chmod(target, (member.mode & 0o755) | 0o600)
            elif member.issym():
                if member.linkname.startswith("/"):
                    raise UnsafeArchive(f"{member.name!r} links to an absolute path")
                os.makedirs(parent, exist_ok=True)
                os.symlink(member.linkname, target)
                check_inside(target, f"the link {member.name!r}")
            elif member.islnk():
                source_path = os.path.join(root, _safe_member_name(member.linkname) or ".")
                check_inside(source_path, f"the hard link {member.name!r}")
                if not os.path.isfile(source_path):
                    raise UnsafeArchive(f"{member.name!r} links to no extracted file")
                os.makedirs(parent, exist_ok=True)
                shutil.copyfile(source_path, target)
            else:
                raise UnsafeArchive(f"{member.name!r} is not a file, folder or link")


class ResumeError(Exception):
    """The checkpoint to resume from could not be fetched or used."""


def fetch_resume(
    client: ControlClient,
    resume_from: Any,
    workdir: Path,
    *,
    deadline: float,
    should_stop: Callable[[], bool],
    sleep: Callable[[float], object],
    on_retry: Callable[[int, RetryableError, float], object] | None = log_retry,
) -> tuple[Path, int]:
    """Download, check and extract the spec's `resume_from`; return (directory, step).

    Retries while the control plane is away, until `deadline` (a time.monotonic() value) or
    `should_stop()`. Raises ResumeError for every failure except SupersededError, which
    propagates (the attempt is over). A directory left whole by an earlier runner of this
    attempt is used again without a download.
    """
    if not isinstance(resume_from, dict):
        raise ResumeError("resume_from is not an object")
    step, url, sha256 = (resume_from.get(k) for k in ("step", "download_url", "sha256"))
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ResumeError("resume_from has no whole-number step")
    if not isinstance(url, str) or not url or not isinstance(sha256, str):
        raise ResumeError("resume_from needs download_url and sha256")
    resume_dir = workdir / "resume"
    final = resume_dir / f"checkpoint-{step}"
    if final.is_dir():
        return final, step
    resume_dir.mkdir(parents=True, exist_ok=True)
    archive = resume_dir / f"checkpoint-{step}.tar.gz.part"
    partial = resume_dir / f".checkpoint-{step}.partial"
    try:
        with open(archive, "w+b") as out:
            retrying(
                lambda: client.download(url, out),
                deadline=deadline,
                stop=StopWhen(should_stop, sleep),
                on_retry=on_retry,
            )
        actual = sha256_of(archive)
        if actual != sha256.lower():
            raise ResumeError(f"the download hashes to {actual}, not {sha256}")
        shutil.rmtree(partial, ignore_errors=True)
        safe_extract(archive, partial)
        os.replace(partial, final)
    except SupersededError:
        raise
    except (ClientError, UnsafeArchive, tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        shutil.rmtree(partial, ignore_errors=True)
        raise ResumeError(str(exc) or exc.__class__.__name__) from exc
    finally:
        archive.unlink(missing_ok=True)
    return final, step


class ArtifactUploader:
    """Packs and uploads the artifacts the workload announced, one at a time, in order.

    `report(message)` receives the system lines (uploaded, refused, failed). `checkpoint_root`
    is the absolute `$TRAINYARD_CHECKPOINT_DIR`, or None when the job has none (then every
    request is refused); a relative `path` in a line is taken from `work_dir`, the
    workload's working directory. Where a path leads is checked when its upload's turn
    comes, just before packing, so the reader thread never touches the disk.
    """

    def __init__(
        self,
        client: ControlClient,
        *,
        workdir: Path,
        work_dir: Path,
        checkpoint_root: Path | None,
        report: Callable[[str], None],
        on_retry: Callable[[int, RetryableError, float], object] | None = log_retry,
        logs: LogsBefore | None = None,
    ) -> None:
        self.client = client
        self.logs = logs
        self.workdir = workdir
        self.work_dir = work_dir
        self.checkpoint_root = checkpoint_root
        self.report = report
        self.on_retry = on_retry
        self._queue: queue.Queue[ArtifactRequest | None] = queue.Queue()
        self._pending = 0  # queued or in progress
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._closed = False
        self._muted = False
        self._stop = threading.Event()
        self._deadline: float | None = None
        self._count = 0
        self._retry_stop = StopWhen(self._should_stop, self._sleep)
        self._thread = threading.Thread(target=self._run, name="runner-artifacts", daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def pending(self) -> int:
        with self._lock:
            return self._pending

    def offer(self, text: str) -> None:
        """Look at one complete stdout line; queue an upload when it asks for one. Called by
        the reader thread: never blocks on disk or network."""
        request = parse_artifact_line(text)
        if request is None:
            return
        if request.kind == LINE_CHECKPOINT and request.step is None:
            self._say(f"not uploading the checkpoint at {request.path}: it has no step")
            return
        with self._lock:
            if self._closed:
                return
            self._pending += 1
        # The lines printed before this request (the metrics of the steps the checkpoint
        # holds) reach the control plane before the upload does: a runner killed after the
        # upload must not leave a resumed run with steps it never reported.
        seq = self.logs.spooled_seq() if self.logs is not None else 0
        self._queue.put((request, seq))

    def drain(self, deadline: float) -> bool:
        """Stop taking requests and wait until every queued upload is done or `deadline`
        (time.monotonic()) passed; then stop the thread. True when all finished."""
        with self._lock:
            self._closed = True
            self._deadline = deadline
            while self._pending > 0:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._idle.wait(min(left, 0.5))
            done = self._pending == 0
        self.stop(timeout=0)
        return done

    def stop(self, timeout: float = 0) -> None:
        """Stop the thread; from now on it says nothing more (the runner's last line may
        follow at once). An upload in flight is abandoned, not waited for."""
        with self._lock:
            self._closed = True
            self._muted = True
        self._stop.set()
        self._queue.put_nowait(None)  # wakes the thread
        if timeout and self._thread.is_alive():
            self._thread.join(timeout)

    def _say(self, message: str) -> None:
        # Under the lock, so that once `stop()` returned no line of ours can still come.
        with self._lock:
            if not self._muted:
                self.report(message)

    def _should_stop(self) -> bool:
        return self._stop.is_set() or (
            self._deadline is not None and time.monotonic() >= self._deadline
        )

    def _sleep(self, delay: float) -> None:
        if self._deadline is not None:
            delay = min(delay, max(self._deadline - time.monotonic(), 0))
        self._stop.wait(delay)

    def _run(self) -> None:
        while not self._stop.is_set():
            item = self._queue.get()
            if item is None or self._stop.is_set():
                return
            request, seq = item
            try:
                if self.logs is not None and not self.logs.wait_shipped(seq, LOGS_FIRST_S):
                    self._say(f"uploading {request.path} before its log lines were acknowledged")
                self._upload(request)
            except Exception as exc:  # a bug must not stop the uploads after it
                self._say(f"uploading {request.path} failed: {exc!r}")
            finally:
                with self._lock:
                    self._pending -= 1
                    self._idle.notify_all()

    def _upload(self, request: ArtifactRequest) -> None:
        what = request.kind + (f" at step {request.step}" if request.step is not None else "")
        self._count += 1
        tmp = self.workdir / f"artifact-{self._count}.tar.gz.tmp"
        directory = os.path.join(self.work_dir, request.path)
        if self.checkpoint_root is None:
            self._say(f"not uploading {request.path}: the job has no {ENV_CHECKPOINT_DIR}")
            return
        if not (inside(directory, self.checkpoint_root) and os.path.isdir(directory)):
            self._say(
                f"not uploading {request.path}: not a directory inside {self.checkpoint_root}"
            )
            return
        try:
            try:
                packed = pack_directory(directory, tmp)
            except OSError as exc:
                self._say(f"could not pack the {what} ({request.path}): {exc}")
                return
            try:
                answer = retrying(
                    lambda: self.client.upload_artifact(
                        request.kind, request.step, str(packed.path), packed.sha256
                    ),
                    stop=self._retry_stop,
                    on_retry=self.on_retry,
                )
            except RetryStopped:
                self._say(f"gave up uploading the {what}: the runner is finishing")
                return
            except (FatalError, SupersededError, RetryableError) as exc:
                self._say(f"could not upload the {what}: {exc}")
                return
            self._say(
                f"uploaded the {what} ({packed.size} bytes, sha256 {packed.sha256[:12]}…)"
                + (f" as {answer['id']}" if isinstance(answer.get("id"), str) else "")
            )
        finally:
            tmp.unlink(missing_ok=True)


def checkpoint_root(env: dict[str, str], work: Path) -> Path | None:
    """The absolute checkpoint directory of a workload running in `work`, or None."""
    value = env.get(ENV_CHECKPOINT_DIR, "")
    if not value:
        return None
    return Path(os.path.realpath(work / value))
