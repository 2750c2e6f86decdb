"""The runner protocol as code: the names, numbers and message shapes that the runner, the
trainer and the control plane share (docs/runner-protocol.md is the prose).

Standard library only, and importing nothing else of the project: the runner runs on any
python3 >= 3.9 with nothing installed, the trainer imports this module and nothing else of
`runner`, and the control plane imports it from Django code.

**Versions.** The runner sends `PROTOCOL_HEADER: PROTOCOL_VERSION` on every request; the
control plane answers 400 `{"error": {"type": "unsupported_protocol"}}` to a version it does
not speak. `GET spec` carries `protocol_version`; a runner that does not speak it starts
nothing and exits `EXIT_CONFIG`. A missing header or field means version 1: the runners and
control planes from before versioning speak it.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any, TypedDict

# -- versions ----------------------------------------------------------------------------

PROTOCOL_VERSION = 1  # the newest version this code speaks
MIN_PROTOCOL_VERSION = 1  # the oldest one it still speaks
IMPLICIT_PROTOCOL_VERSION = 1  # what a peer that names no version speaks
PROTOCOL_HEADER = "X-Trainyard-Protocol"


def supported(version: int) -> bool:
    """True when `version` is one this code speaks (MIN_PROTOCOL_VERSION..PROTOCOL_VERSION)."""
    return (
        isinstance(version, int)
        and not isinstance(version, bool)
        and MIN_PROTOCOL_VERSION <= version <= PROTOCOL_VERSION
    )


def version_of_header(value: str | None) -> int | None:
    """The version a `PROTOCOL_HEADER` value names: 1 when the header is missing (None), None
    when it is not a whole number (surrounding whitespace is allowed)."""
    if value is None:
        return IMPLICIT_PROTOCOL_VERSION
    text = value.strip()
    if not (text.isascii() and text.isdigit()):
        return None
    return int(text)


def version_of_spec(spec: Mapping[str, Any]) -> int | None:
    """The version a spec answer names in `protocol_version`: 1 when it is missing or null,
    None when it is not a whole number."""
    value = spec.get("protocol_version")
    if value is None:
        return IMPLICIT_PROTOCOL_VERSION
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


# -- error types (`{"error": {"type": ...}}`) ----------------------------------------------

ERROR_ATTEMPT_SUPERSEDED = "attempt_superseded"  # 409: the runner exits 0
ERROR_UNSUPPORTED_PROTOCOL = "unsupported_protocol"  # 400: the runner exits 2

# -- orders (the answer of `started` and `heartbeat`) -----------------------------------


class Order(str, enum.Enum):  # noqa: UP042 - enum.StrEnum is 3.11+
    """What the control plane asks of the runner; compares equal to its string."""

    CONTINUE = "continue"
    TERMINATE = "terminate"
    CHECKPOINT_AND_EXIT = "checkpoint_and_exit"


ORDER_CONTINUE = Order.CONTINUE.value
ORDER_TERMINATE = Order.TERMINATE.value
ORDER_CHECKPOINT_AND_EXIT = Order.CHECKPOINT_AND_EXIT.value

# -- exit codes ----------------------------------------------------------------------------

# The runner's own exit status.
EXIT_OK = 0  # done, or superseded
EXIT_REFUSED = 1  # the token was refused (401/404)
EXIT_CONFIG = 2  # bad configuration, or a protocol version the runner does not speak
EXIT_UNREPORTED = 69  # EX_UNAVAILABLE: the exit could not be reported in time
EXIT_LOCKED = 75  # EX_TEMPFAIL: another runner holds the workdir

# The workload's exit code, as `exit` reports it.
EXIT_GRADING_FAILED = 3  # the trainer graded its adapter and it failed
# EX_DATAERR: the job's code archive or inline files could not be put in place (download,
# checksum, a member escaping the root); the workload never started.
EXIT_WORKDIR_INVALID = 65
EXIT_NO_INPUT = 66  # EX_NOINPUT: an input of the spec could not be fetched
EXIT_CANNOT_EXECUTE = 126  # the command is not executable
EXIT_NOT_FOUND = 127  # the command was not found, or the spec cannot be run
EXIT_SIGTERM = 143  # 128 + SIGTERM: terminated (or never started: terminated before)
EXIT_SIGKILL = 137  # 128 + SIGKILL: killed (the runner's own kill after a terminate's grace)

# -- environment variables -------------------------------------------------------------

# Set by a backend for the runner; the first four are never passed on to the workload.
ENV_CONTROL_URL = "TRAINYARD_CONTROL_URL"
ENV_RUNNER_TOKEN = "TRAINYARD_RUNNER_TOKEN"
# Instead of ENV_RUNNER_TOKEN: a file holding the token, which the runner reads and deletes
# before the workload starts, so the token is in no environment the workload can read.
ENV_RUNNER_TOKEN_FILE = "TRAINYARD_RUNNER_TOKEN_FILE"
ENV_WORKDIR = "TRAINYARD_WORKDIR"
ENV_JOB_ID = "TRAINYARD_JOB_ID"  # also in the spec's env, for the workload
# Optional: a relay on the runner's host (`python -m runner relay`) that carries its log
# batches and heartbeats to the control plane bundled with other runners' (`POST relay`).
ENV_RELAY_URL = "TRAINYARD_RELAY_URL"
# Optional: a Unix socket that carries every call to the control plane (a container with a
# network of its own reaches nothing else of its host; `runner.control_socket`). With it,
# TRAINYARD_CONTROL_URL only names the origin.
ENV_CONTROL_SOCKET = "TRAINYARD_CONTROL_SOCKET"
# Optional: a directory kept for this organization's workloads on this provider, where the
# runner points the Hugging Face cache (HF_HUB_CACHE) unless the job names its own
# (HF_HOME or HF_HUB_CACHE), so a second attempt does not download a model again.
ENV_HUB_CACHE = "TRAINYARD_HUB_CACHE"
# Optional: a file where the runner writes `{"started": true}` when it starts and its exit
# record (as `exit.json`) when it ends, for a provider that cannot read the work directory
# but reads this file when the container ends (Kubernetes' terminationMessagePath).
ENV_EXIT_MESSAGE_FILE = "TRAINYARD_EXIT_MESSAGE_FILE"
# Set by the control plane in the spec's env, for the workload.
ENV_ATTEMPT = "TRAINYARD_ATTEMPT"
ENV_CHECKPOINT_DIR = "TRAINYARD_CHECKPOINT_DIR"  # relative to the workload's directory
ENV_HUB_NAMESPACE = "TRAINYARD_HUB_NAMESPACE"  # the organization whose repos HF_ENDPOINT holds
ENV_RESUME_FROM = "TRAINYARD_RESUME_FROM"  # set by the runner to the checkpoint fetched
# Set by a backend whose workloads have a network of their own: the port in it that is
# published to the host's loopback (the control plane's one way in to a serving workload).
ENV_SERVICE_PORT = "TRAINYARD_SERVICE_PORT"
# Set by the control plane for a serve job: the secret every request to the engine carries.
ENV_SERVE_SECRET = "TRAINYARD_SERVE_SECRET"

# -- relaying (`POST relay`: many runners' calls in one request) -----------------------------

RELAY_PATH = "/api/v1/runner/relay"
RELAY_CALL_LOGS = "logs"
RELAY_CALL_HEARTBEAT = "heartbeat"
RELAY_MAX_ENTRIES = 500  # entries a bundle may carry
# A bundle at `RELAY_PATH?calls=heartbeat` carries heartbeats only: admission control lets
# it in as a heartbeat, not behind the log batches (and any other entry is that entry's 400).
RELAY_HEARTBEATS_QUERY = "calls=heartbeat"

# -- the workload's JSON lines on stdout (`{"type": ...}`) ----------------------------------

LINE_METRICS = "metrics"  # a metric point, for the control plane's ingestion
LINE_CHECKPOINT = "checkpoint"  # a checkpoint directory, for the runner to upload
LINE_GRADING = "grading"  # the trainer's verdict, kept as the job's `grading` event
LINE_ADAPTER = "adapter"  # the final adapter directory, for the runner to upload
LINE_MERGED = "merged"  # the base model with the final adapter merged in, to upload
# Also the upload kinds.
ARTIFACT_LINE_TYPES = frozenset({LINE_CHECKPOINT, LINE_ADAPTER, LINE_MERGED})
# A serving workload listens: `{"type": "serving", "port": N, "models": [...]}`.
LINE_SERVING = "serving"
# Where a tracker (W&B, MLflow) keeps the run: `{"type": "tracker_run", "tracker": "wandb",
# "run_id": ..., "url": ... or null}`, kept as the job's `tracker_run` event.
LINE_TRACKER_RUN = "tracker_run"

# -- log lines -----------------------------------------------------------------------------

SOURCE_USER = "user"  # the workload's output
SOURCE_SYSTEM = "system"  # the runner's own lines
STREAM_STDOUT = "stdout"
STREAM_STDERR = "stderr"
MAX_MESSAGE_CHARS = 16384  # a longer line is sent as several

# -- artifact uploads and downloads ----------------------------------------------------------

SHA256_HEADER = "X-Trainyard-SHA256"  # hex digest of an upload's body, or of a download
ARTIFACT_CONTENT_TYPE = "application/gzip"  # the body: a tar.gz of the directory

# -- message shapes ------------------------------------------------------------------------


class ResumeFrom(TypedDict):
    """The spec's `resume_from`: the checkpoint to resume from."""

    artifact_id: str
    step: int
    sha256: str
    download_url: str


class InputFile(TypedDict):
    """One item of the spec's `inputs`."""

    path: str
    download_url: str
    sha256: str
    size_bytes: int


class WorkdirArchive(TypedDict):
    """The spec's `workdir`: the job's code archive, unpacked into the working directory."""

    id: str
    format: str  # "tar.gz" or "zip"
    download_url: str
    sha256: str
    size_bytes: int


HUB_PATH = "/hf"  # where a control plane serves its Hugging Face compatible hub


def hub_reference(value: str) -> tuple[str, str | None]:
    """`<namespace>/<name>@<revision>` as (repo id, revision); without `@`, (value, None).
    A revision is a branch, a tag or a commit id of the repository."""
    repo_id, at, revision = value.partition("@")
    return (repo_id, revision) if at and revision else (value, None)


class HubAccess(TypedDict):
    path: str


class SpecResponse(TypedDict, total=False):
    """The answer of `GET spec`. Exactly one of `command` and `script_b64` is set; a runner
    reads a missing `protocol_version` as 1."""

    job_id: str
    attempt: int
    command: list[str] | None
    script_b64: str | None
    env: dict[str, str]
    mask: list[str]
    heartbeat_interval_s: float
    log_batch_max_lines: int
    log_batch_max_interval_s: float
    log_gzip_min_bytes: int | None  # absent from older control planes: never gzip
    terminate_grace_s: float
    final_flush_timeout_s: float
    resume_from: ResumeFrom | None
    inputs: list[InputFile]
    workdir: WorkdirArchive | None  # absent from older control planes: none
    files: dict[str, str]  # relative path -> text, written after the archive
    # This control plane's hub, for the workload (None: the spec's env names HF_ENDPOINT
    # itself, or an older control plane): the runner sets HF_ENDPOINT to its control URL
    # plus `path`, or to a door on the workload's loopback (runner.hub_door).
    hub: HubAccess | None
    protocol_version: int


class Started(TypedDict):
    """The body of `POST started`."""

    pid: int
    resumed_from_step: int | None


class Heartbeat(TypedDict):
    """The body of `POST heartbeat`."""

    last_seq: int


class OrderAnswer(TypedDict):
    """The answer of `POST started` and `POST heartbeat`: an `Order` value."""

    order: str


class LogLine(TypedDict):
    """One line of `POST logs`, also one line of the runner's spool."""

    seq: int
    ts: str
    source: str  # SOURCE_USER or SOURCE_SYSTEM
    stream: str  # STREAM_STDOUT or STREAM_STDERR
    message: str


class LogBatch(TypedDict):
    """The body of `POST logs`."""

    lines: list[LogLine]


class LogsAnswer(TypedDict, total=False):
    """The answer of `POST logs`. `order` is the runner's order, as a heartbeat answer
    carries it: the batch counted as a heartbeat (absent from older control planes)."""

    accepted: int
    duplicates: int
    order: str


class Exit(TypedDict):
    """The body of `POST exit`."""

    exit_code: int
    last_seq: int


class ArtifactAnswer(TypedDict):
    """The answer of `POST artifacts`."""

    id: str
    sha256: str
    size_bytes: int


class ErrorDetail(TypedDict):
    type: str
    message: str
    param: str | None


class ErrorAnswer(TypedDict):
    """Any error answer."""

    error: ErrorDetail


# -- into a running job: shell sessions over the runner's channel -------------------------
#
# An SSH gateway (or the job page's terminal) in the control plane asks for a session; the
# runner opens it inside the workload's environment and carries its bytes over plain HTTP
# calls of its own, so no port is ever opened on the node (docs/runner-protocol.md,
# "Shell sessions"):
#
# - The answers of `started`, `heartbeat` and `logs` carry `SHELL_ANSWER_KEY: true` while
#   sessions wait for this attempt. The runner then long-polls `GET SHELL_ACCEPT?wait=S`
#   (at most SHELL_WAIT_MAX_S), which answers `{"sessions": [ShellRequest, ...]}` (empty
#   when none came in time), for as long as the hint keeps coming and for
#   SHELL_ACCEPT_LINGER_S after it stopped.
# - For each request it starts the session and carries its frames: `GET SHELL_DOWN?wait=S`
#   answers the frames the client sent (application/octet-stream; empty when none came in
#   time); `POST SHELL_UP` with frames answers `{"backlog": n}` (frames not yet taken by
#   the client: the runner slows down while it is over SHELL_UP_BACKLOG_MAX). Either answers
#   404 `session_not_found` once the session is gone; the runner then ends it.
# - Frames: one type byte, a 4-byte big-endian length, the payload (`encode_frame`).

SHELL_ANSWER_KEY = "shell"
SHELL_ACCEPT = "ssh/accept"
SHELL_DOWN = "ssh/{sid}/down"
SHELL_UP = "ssh/{sid}/up"
SHELL_WAIT_MAX_S = 20.0
SHELL_ACCEPT_LINGER_S = 60.0
SHELL_UP_BACKLOG_MAX = 64
SHELL_FRAME_MAX_BYTES = 256 * 1024  # the largest payload one frame may carry
ERROR_SESSION_NOT_FOUND = "session_not_found"

# Client -> workload (`down`).
FRAME_STDIN = b"d"  # bytes for the process's stdin (or the TCP connection)
FRAME_EOF = b"e"  # the client will send no more
FRAME_WINDOW = b"w"  # JSON {"cols": int, "rows": int}: the terminal was resized
FRAME_SIGNAL = b"s"  # JSON {"name": "INT"}: a signal for the process (its group)
FRAME_CLOSE = b"c"  # JSON {"message": str}: the session is over; kill what is left
# Workload -> client (`up`).
FRAME_OPENED = b"a"  # JSON {"ok": true} or {"error": str}: the session started, or why not
FRAME_STDOUT = b"o"  # the process's stdout (with a PTY: the terminal's output; TCP: data)
FRAME_STDERR = b"r"  # the process's stderr (never with a PTY)
FRAME_EXIT = b"x"  # JSON {"status": int} or {"signal": "TERM"}: how the process ended
FRAME_CLOSED = b"z"  # the last frame of a session: nothing follows (`FRAME_STDOUT` EOF too)

_FRAME_HEADER = 5


class ShellPty(TypedDict):
    term: str
    cols: int
    rows: int


class ShellRequest(TypedDict):
    """One session to open, as `GET SHELL_ACCEPT` lists it.

    `kind` "session": a login shell when `command` and `subsystem` are both None, else
    `command` run by the workload's shell (`sh -c`), or `subsystem` ("sftp" only); `pty` is
    set when the client asked for a terminal. `kind` "tcp": a connection to `host`:`port`
    as the workload would open it (its own loopback in a container: `ssh -L`)."""

    sid: str
    kind: str  # "session" | "tcp"
    command: str | None
    subsystem: str | None
    pty: ShellPty | None
    env: dict[str, str]  # what the client asked to set (LANG, LC_*, TERM only)
    host: str | None
    port: int | None


def encode_frame(kind: bytes, payload: bytes = b"") -> bytes:
    """One frame: `kind` (one byte), the payload's length (4 bytes, big-endian), the payload."""
    if len(kind) != 1:
        raise ValueError("a frame's kind is one byte")
    if len(payload) > SHELL_FRAME_MAX_BYTES:
        raise ValueError(f"a frame carries at most {SHELL_FRAME_MAX_BYTES} bytes")
    return kind + len(payload).to_bytes(4, "big") + payload


def decode_frames(data: bytes) -> list[tuple[bytes, bytes]]:
    """The frames `data` holds, in order, as (kind, payload). Raises ValueError when a frame
    is cut short or longer than SHELL_FRAME_MAX_BYTES."""
    frames = []
    at = 0
    while at < len(data):
        if len(data) - at < _FRAME_HEADER:
            raise ValueError("a frame's header is cut short")
        kind = data[at : at + 1]
        size = int.from_bytes(data[at + 1 : at + _FRAME_HEADER], "big")
        if size > SHELL_FRAME_MAX_BYTES:
            raise ValueError(f"a frame of {size} bytes is over {SHELL_FRAME_MAX_BYTES}")
        end = at + _FRAME_HEADER + size
        if end > len(data):
            raise ValueError("a frame's payload is cut short")
        frames.append((kind, data[at + _FRAME_HEADER : end]))
        at = end
    return frames
