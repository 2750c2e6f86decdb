"""The runner's main flow, as `docs/runner-protocol.md` describes it.

1. Read the configuration (exit 2 when a variable is missing); create the workdir; take an
   exclusive non-blocking `flock` on `runner.lock` (exit 75 when another runner holds it)
   and write `runner.pid`.
2. Fetch the spec, retrying while the control plane is away.
3. Start the workload in the runner's own process group, with its output piped through the
   `OutputCollector` into the `Spool`; a `LogSender` thread ships spooled lines in batches,
   a `Heartbeat` thread posts `started`, then heartbeats, and passes on the orders.
4. The main thread supervises: it alone sends signals. `terminate` (an order, or SIGTERM /
   SIGINT to the runner) sends SIGTERM to the process group and SIGKILLs the workload's
   process after `terminate_grace_s`; `checkpoint_and_exit` sends SIGUSR1 to the group
   first and terminates after the grace.
5. When the workload exits: `exit.json` is written, the readers drained, the line
   `workload exited with code N` spooled, every line flushed, `exit` posted, exit 0 — all
   within `final_flush_timeout_s`.

Exit statuses of the runner: 0 done (or superseded), 1 the token was refused (401/404),
2 bad configuration, 69 the control plane could not be told of the exit within
`final_flush_timeout_s` (`exit.json` still says what happened), 75 another runner holds the
workdir.

Decisions where the page is silent:

- A workload that cannot start (bad spec, command not found) is reported as exit code 127
  (126 when not executable), with a system line saying why; `started` is not sent.
- A terminate (signal) before the spec arrived: the workload never starts, `exit.json`
  says 143, the runner exits 0 without reporting (the control plane was unreachable).
- SIGTERM to the whole group reaches the workload directly, and the runner, handling it
  like a `terminate` order, sends SIGTERM to the group once more: the runner cannot tell a
  signal to its group from one to itself alone, and in the second case the workload must
  still get it.
- After the workload exits, its readers get `READER_DRAIN_TIMEOUT_S` to reach EOF (a
  background process it left may hold the pipes open); output after that is read but not
  spooled, so `workload exited with code N` is the last line.
- `heartbeat.last_seq` and `exit.last_seq` are the highest seq spooled.
- `exit` is still attempted (once, at least) when `final_flush_timeout_s` ran out before
  every line was acknowledged; its `last_seq` then tells the control plane lines are missing.
- Inputs (`runner.inputs`): files the spec lists under `inputs` (a fine-tune's uploaded
  dataset) are downloaded into the workload's working directory after the checkpoint to
  resume from, before the workload starts, retrying for at most `final_flush_timeout_s`.
  When one cannot be had, the workload does not start: a system line says which and why,
  and the exit code reported is 66 (EX_NOINPUT).
- Artifacts (`runner.artifacts`): the checkpoint to resume from is fetched after the spec,
  before the workload starts, retrying for at most `final_flush_timeout_s`; when that fails
  the workload starts without it. Uploads run in their own thread; when the workload has
  exited, the runner waits up to `final_flush_timeout_s` for them before its last line, then
  gives lines and `exit` their own `final_flush_timeout_s`.
"""

from __future__ import annotations

import base64
import binascii
import fcntl
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.artifacts import ArtifactUploader, ResumeError, checkpoint_root, fetch_resume
from runner.client import (
    ControlClient,
    FatalError,
    RetryableError,
    RetryStopped,
    SupersededError,
    call_with_retry,
)
from runner.config import WORKLOAD_HIDDEN_VARS, ConfigError, RunnerConfig, load_config
from runner.inputs import InputError, fetch_inputs
from runner.masking import Masker
from runner.output import OutputCollector, utc_now_iso
from runner.spool import Spool

EXIT_OK = 0
EXIT_REFUSED = 1
EXIT_CONFIG = 2
EXIT_UNREPORTED = 69  # EX_UNAVAILABLE
EXIT_LOCKED = 75  # EX_TEMPFAIL

EXIT_NO_INPUT = 66  # EX_NOINPUT: an input of the spec could not be fetched
EXIT_CANNOT_EXECUTE = 126
EXIT_NOT_FOUND = 127

READER_DRAIN_TIMEOUT_S = 2.0
# A request body stays well under the 2.5 MB a Django server accepts by default
# (DATA_UPLOAD_MAX_MEMORY_SIZE), even for a batch of 16,384-character lines.
MAX_BATCH_BYTES = 1_000_000
THREAD_JOIN_TIMEOUT_S = 12.0  # a request in flight times out after 10 s
SUPERVISE_POLL_S = 0.1


def log(message: str) -> None:
    """The runner's own diagnostics, on its stderr (never the job's log)."""
    print(f"runner: {message}", file=sys.stderr, flush=True)


def _log_retry(attempt: int, error: RetryableError, delay: float) -> None:
    if attempt == 1 or attempt % 10 == 0:
        log(f"{error} (try {attempt}; next in {delay:.1f} s)")


def exit_code_of(returncode: int) -> int:
    """The reported exit code: a signal-killed workload (negative returncode) is 128 + sig."""
    return 128 - returncode if returncode < 0 else returncode


@dataclass
class JobSpec:
    """The answer of `GET spec`, with the page's defaults where a setting is missing."""

    job_id: str = ""
    attempt: int = 0
    command: list[str] | None = None
    script_b64: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    mask: list[str] = field(default_factory=list)
    heartbeat_interval_s: float = 5.0
    log_batch_max_lines: int = 1000
    log_batch_max_interval_s: float = 0.25
    terminate_grace_s: float = 10.0
    final_flush_timeout_s: float = 600.0
    resume_from: Any = None  # checked by runner.artifacts.fetch_resume
    inputs: Any = None  # checked by runner.inputs.fetch_inputs

    @classmethod
    def from_json(cls, data: dict) -> JobSpec:
        """Lenient on settings (a bad number falls back to its default); `command`,
        `script_b64` are checked when the workload is built (`workload_argv`)."""
        spec = cls()

        def number(name: str, kind: Callable[[Any], Any], minimum: float) -> None:
            value = data.get(name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                return
            if value >= minimum:
                setattr(spec, name, kind(value))

        spec.job_id = str(data.get("job_id") or "")
        spec.attempt = data.get("attempt") if isinstance(data.get("attempt"), int) else 0
        spec.command = data.get("command")
        spec.script_b64 = data.get("script_b64")
        env = data.get("env") or {}
        if isinstance(env, dict):
            spec.env = {str(k): "" if v is None else str(v) for k, v in env.items()}
        mask = data.get("mask") or []
        if isinstance(mask, list):
            spec.mask = [value for value in mask if isinstance(value, str)]
        number("heartbeat_interval_s", float, 0.05)
        number("log_batch_max_lines", int, 1)
        number("log_batch_max_interval_s", float, 0)
        number("terminate_grace_s", float, 0)
        number("final_flush_timeout_s", float, 0)
        spec.resume_from = data.get("resume_from")
        spec.inputs = data.get("inputs") or None
        return spec


class SpecError(Exception):
    """The spec cannot be run (neither or both of command and script_b64, bad base64)."""


def workload_argv(spec: JobSpec, workdir: Path) -> list[str]:
    """The workload's argv; writes `{workdir}/script.sh` for a script job."""
    has_command = spec.command is not None
    has_script = spec.script_b64 is not None
    if has_command == has_script:
        raise SpecError("the spec must set exactly one of command and script_b64")
    if has_command:
        command = spec.command
        if not (isinstance(command, list) and command and all(isinstance(a, str) for a in command)):
            raise SpecError("command must be a non-empty list of strings")
        return list(command)
    try:
        script = base64.b64decode(str(spec.script_b64), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise SpecError(f"script_b64 is not base64: {exc}") from exc
    path = workdir / "script.sh"
    path.write_bytes(script)
    path.chmod(0o700)
    return ["bash", str(path)]


def workload_env(spec: JobSpec, base: dict[str, str] | None = None) -> dict[str, str]:
    """The runner's environment minus the runner's own variables, plus the spec's env."""
    source = os.environ if base is None else base
    env = {key: value for key, value in source.items() if key not in WORKLOAD_HIDDEN_VARS}
    env.update(spec.env)
    return env


def write_exit_json(workdir: Path, exit_code: int) -> None:
    """Write `{workdir}/exit.json` atomically."""
    path = workdir / "exit.json"
    tmp = path.with_name("exit.json.tmp")
    tmp.write_text(json.dumps({"exit_code": exit_code, "finished_at": utc_now_iso()}) + "\n")
    os.replace(tmp, path)


class Aborted(Exception):
    """Raised in the main thread once a thread saw 401/404 or 409 superseded."""


class LogSender:
    """Ships spooled lines: a batch holds at most `max_lines` (and `MAX_BATCH_BYTES` of
    JSON) and goes when it is full or `max_interval_s` after its first line was seen;
    `flush_now()` sends without waiting. A line is acknowledged in the spool only after the
    control plane answered 200 for its batch.

    Retries forever until `stop()`; a refusal calls `on_abort(exit_status, reason)`.
    """

    def __init__(
        self,
        client: ControlClient,
        spool: Spool,
        *,
        max_lines: int,
        max_interval_s: float,
        on_abort: Callable[[int, str], None],
    ) -> None:
        self.client = client
        self.spool = spool
        self.max_lines = max_lines
        self.max_interval_s = max_interval_s
        self.on_abort = on_abort
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._flush = False
        self._idle = True
        self._thread = threading.Thread(target=self._run, name="runner-sender", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def notify(self) -> None:
        """Called after lines were spooled; wakes the sender only when that matters, so a
        fast workload does not wake it once per line."""
        if self._idle or self.spool.pending >= self.max_lines:
            self._wake.set()

    def flush_now(self) -> None:
        self._flush = True
        self._wake.set()

    def stop(self, timeout: float = THREAD_JOIN_TIMEOUT_S) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _wait(self, timeout: float) -> None:
        self._wake.wait(timeout)
        self._wake.clear()

    def _run(self) -> None:
        first_seen: float | None = None
        while not self._stop.is_set():
            pending = self.spool.pending
            if pending <= 0:
                first_seen = None
                self._idle = True
                if self.spool.pending <= 0:  # a line may have come before _idle was set
                    self._wait(1.0)
                self._idle = False
                continue
            now = time.monotonic()
            if first_seen is None:
                first_seen = now
            due = first_seen + self.max_interval_s
            if pending < self.max_lines and now < due and not self._flush:
                self._wait(due - now)
                continue
            lines = self.spool.unacked(self.max_lines, MAX_BATCH_BYTES)
            try:
                call_with_retry(
                    lambda lines=lines: self.client.post_logs(lines),
                    should_stop=self._stop.is_set,
                    sleep=self._stop.wait,
                    on_retry=_log_retry,
                )
            except RetryStopped:
                return
            except SupersededError as exc:
                self.on_abort(EXIT_OK, str(exc))
                return
            except FatalError as exc:
                self.on_abort(EXIT_REFUSED, str(exc))
                return
            except Exception as exc:  # a bug must not silently stop the logs
                log(f"sending logs failed: {exc!r}")
                self._stop.wait(1.0)
                continue
            self.spool.ack(lines[-1]["seq"])
            if len(lines) >= pending:
                first_seen = None
            # else: lines seen before this send are left (the batch was cut by size); they
            # are due already, so the next batch goes at once.


class Heartbeat:
    """Posts `started` once, then a heartbeat every `interval_s`; hands each answer's
    order to `on_order`. Retries forever until `stop()`; a refusal calls `on_abort`."""

    def __init__(
        self,
        client: ControlClient,
        *,
        pid: int,
        resumed_from_step: int | None = None,
        interval_s: float,
        last_seq: Callable[[], int],
        on_order: Callable[[str], None],
        on_abort: Callable[[int, str], None],
    ) -> None:
        self.client = client
        self.pid = pid
        self.resumed_from_step = resumed_from_step
        self.interval_s = interval_s
        self.last_seq = last_seq
        self.on_order = on_order
        self.on_abort = on_abort
        self.started_acked = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="runner-heartbeat", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = THREAD_JOIN_TIMEOUT_S) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _call(self, fn: Callable[[], dict]) -> dict:
        return call_with_retry(
            fn, should_stop=self._stop.is_set, sleep=self._stop.wait, on_retry=_log_retry
        )

    def _run(self) -> None:
        try:
            answer = self._call(lambda: self.client.post_started(self.pid, self.resumed_from_step))
            self.started_acked = True
            self._obey(answer)
            while not self._stop.wait(self.interval_s):
                try:
                    answer = self._call(lambda: self.client.post_heartbeat(self.last_seq()))
                except (RetryStopped, SupersededError, FatalError):
                    raise
                except Exception as exc:  # a bug must not stop the heartbeats
                    log(f"heartbeat failed: {exc!r}")
                    continue
                self._obey(answer)
        except RetryStopped:
            return
        except SupersededError as exc:
            self.on_abort(EXIT_OK, str(exc))
        except FatalError as exc:
            self.on_abort(EXIT_REFUSED, str(exc))

    def _obey(self, answer: dict) -> None:
        order = answer.get("order", "continue")
        if order != "continue":
            self.on_order(str(order))


class Runner:
    """One run of the agent on one workdir. `run()` returns the runner's exit status."""

    def __init__(self, config: RunnerConfig, *, client: ControlClient | None = None) -> None:
        self.config = config
        self.workdir = config.workdir
        self.client = client or ControlClient(config.control_url, config.job_id, config.token)
        # Written by signal handlers and other threads, read by the main thread; plain
        # attributes, because a signal handler must not take a lock the main thread holds.
        self._terminate_requested = False
        self._checkpoint_requested = False
        self._abort: tuple[int, str] | None = None
        self._lock_fh: Any = None
        self.spool: Spool | None = None
        self.collector: OutputCollector | None = None
        self.sender: LogSender | None = None
        self.heartbeat: Heartbeat | None = None
        self.uploader: ArtifactUploader | None = None
        # The checkpoint step the workload resumes from; None when it starts from scratch.
        self.resumed_from_step: int | None = None

    # -- requests from other threads and signals -----------------------------------------

    def abort(self, status: int, reason: str) -> None:
        """A thread was refused (401/404) or superseded: stop the workload, exit `status`."""
        if self._abort is None:
            self._abort = (status, reason)
            log(f"stopping: {reason}")

    def order(self, order: str) -> None:
        if order == "terminate":
            self._terminate_requested = True
        elif order == "checkpoint_and_exit":
            self._checkpoint_requested = True
        else:
            log(f"ignoring unknown order {order!r}")

    def _on_terminate_signal(self, signum: int, frame: object) -> None:
        self._terminate_requested = True

    def _on_usr1(self, signum: int, frame: object) -> None:
        # The runner shares the workload's group, so it receives the SIGUSR1 it sends. A
        # handler rather than SIG_IGN: an ignored signal stays ignored across exec, and a
        # bash workload could then not even trap it.
        pass

    def _install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, self._on_terminate_signal)
        signal.signal(signal.SIGINT, self._on_terminate_signal)
        signal.signal(signal.SIGUSR1, self._on_usr1)

    def _stopping(self) -> bool:
        return self._terminate_requested or self._abort is not None

    def _sleep_unless_stopping(self, delay: float) -> None:
        """A backoff sleep in the main thread that a terminate signal cuts short (a plain
        time.sleep resumes after the handler ran)."""
        end = time.monotonic() + delay
        while not self._stopping():
            left = end - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(left, SUPERVISE_POLL_S))

    # -- the flow ----------------------------------------------------------------------

    def run(self) -> int:
        """Call from the main thread (signal handlers are installed here)."""
        self._install_signal_handlers()
        try:
            self.workdir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            log(f"cannot create the workdir: {exc}")
            return EXIT_CONFIG
        if not self._take_lock():
            log(f"another runner holds {self.workdir / 'runner.lock'}; exiting")
            return EXIT_LOCKED
        self.spool = Spool(self.workdir)
        try:
            return self._run_locked()
        finally:
            self._shutdown()

    def _take_lock(self) -> bool:
        fh = open(self.workdir / "runner.lock", "a+")  # noqa: SIM115 - held for life
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.close()
            return False
        self._lock_fh = fh
        (self.workdir / "runner.pid").write_text(f"{os.getpid()}\n")
        return True

    def _run_locked(self) -> int:
        try:
            answer = call_with_retry(
                self.client.get_spec,
                should_stop=self._stopping,
                sleep=self._sleep_unless_stopping,
                on_retry=_log_retry,
            )
        except SupersededError as exc:
            log(str(exc))
            return EXIT_OK
        except FatalError as exc:
            log(str(exc))
            return EXIT_REFUSED
        except RetryStopped:
            log("terminated before the spec arrived; the workload never started")
            write_exit_json(self.workdir, 128 + signal.SIGTERM)
            return EXIT_OK
        spec = JobSpec.from_json(answer)

        assert self.spool is not None
        sender = LogSender(
            self.client,
            self.spool,
            max_lines=spec.log_batch_max_lines,
            max_interval_s=spec.log_batch_max_interval_s,
            on_abort=self.abort,
        )
        self.sender = sender
        collector = OutputCollector(self.spool, Masker(spec.mask), notify=sender.notify)
        self.collector = collector
        work = self.workdir / "work"
        uploader = ArtifactUploader(
            self.client,
            workdir=self.workdir,
            work_dir=work,
            checkpoint_root=checkpoint_root(workload_env(spec), work),
            report=collector.system,
            on_retry=_log_retry,
        )
        self.uploader = uploader
        collector.on_stdout_line = uploader.offer
        uploader.start()
        sender.start()
        collector.system("fetched spec")
        if spec.resume_from is not None:
            self._resume(spec)
        if spec.inputs is not None and self._abort is None and not self._fetch_inputs(spec):
            proc, exit_code = None, EXIT_NO_INPUT
        else:
            proc, exit_code = self._start_workload(spec)
        if proc is not None:
            exit_code = self._supervise(proc, spec)
            if self._abort is not None:
                write_exit_json(self.workdir, exit_code)
                return self._abort[0]
            collector.join_readers(READER_DRAIN_TIMEOUT_S)
        return self._finish(spec, exit_code)

    def _resume(self, spec: JobSpec) -> None:
        """Fetch the checkpoint to resume from and point TRAINYARD_RESUME_FROM at it; on
        failure the workload starts without it (a system line says why)."""
        assert self.collector is not None
        try:
            directory, step = fetch_resume(
                self.client,
                spec.resume_from,
                self.workdir,
                deadline=time.monotonic() + spec.final_flush_timeout_s,
                should_stop=self._stopping,
                sleep=self._sleep_unless_stopping,
                on_retry=_log_retry,
            )
        except SupersededError as exc:
            self.abort(EXIT_OK, str(exc))
            return
        except ResumeError as exc:
            if not self._stopping():
                self.collector.system(
                    f"could not fetch the checkpoint to resume from: {exc}; starting without it"
                )
            return
        spec.env["TRAINYARD_RESUME_FROM"] = str(directory)
        self.resumed_from_step = step
        self.collector.system(f"resuming from checkpoint at step {step}")

    def _fetch_inputs(self, spec: JobSpec) -> bool:
        """Download the spec's inputs into the working directory; False (with a system line
        saying why) when the workload cannot start."""
        assert self.collector is not None
        try:
            fetched = fetch_inputs(
                self.client,
                spec.inputs,
                self.workdir / "work",
                deadline=time.monotonic() + spec.final_flush_timeout_s,
                should_stop=self._stopping,
                sleep=self._sleep_unless_stopping,
                on_retry=_log_retry,
            )
        except SupersededError as exc:
            self.abort(EXIT_OK, str(exc))
            return True  # _start_workload sees the abort and starts nothing
        except InputError as exc:
            if self._stopping():  # terminated meanwhile: _start_workload says so
                return True
            self.collector.system(f"could not fetch an input: {exc}; not starting the workload")
            return False
        for path in fetched:
            self.collector.system(f"fetched input {path.relative_to(self.workdir / 'work')}")
        return True

    def _start_workload(self, spec: JobSpec) -> tuple[subprocess.Popen | None, int]:
        """Start the workload; `(proc, 0)`, or `(None, exit code)` when it cannot start."""
        assert self.collector is not None
        work = self.workdir / "work"
        try:
            argv = workload_argv(spec, self.workdir)
            work.mkdir(parents=True, exist_ok=True)
            env = workload_env(spec)
            checkpoint_dir = env.get("TRAINYARD_CHECKPOINT_DIR", "")
            if checkpoint_dir:
                (work / checkpoint_dir).mkdir(parents=True, exist_ok=True)
        except (SpecError, OSError) as exc:
            self.collector.system(f"cannot start the workload: {exc}")
            return None, EXIT_NOT_FOUND
        if self._stopping():
            self.collector.system("terminated before the workload started")
            return None, 128 + signal.SIGTERM
        self.collector.system(f"starting workload: {shlex.join(argv)}")
        try:
            # No new session: the workload shares the runner's process group, so a signal
            # to the group reaches the runner and everything the workload starts.
            proc = subprocess.Popen(
                argv,
                cwd=str(work),
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                close_fds=True,
            )
        except OSError as exc:
            self.collector.system(f"cannot start the workload: {exc}")
            return None, EXIT_CANNOT_EXECUTE if isinstance(exc, PermissionError) else EXIT_NOT_FOUND
        assert proc.stdout is not None and proc.stderr is not None
        self.collector.start_reader(proc.stdout, "stdout")
        self.collector.start_reader(proc.stderr, "stderr")
        heartbeat = Heartbeat(
            self.client,
            pid=proc.pid,
            resumed_from_step=self.resumed_from_step,
            interval_s=spec.heartbeat_interval_s,
            last_seq=lambda: self.collector.last_seq if self.collector else 0,
            on_order=self.order,
            on_abort=self.abort,
        )
        self.heartbeat = heartbeat
        heartbeat.start()
        return proc, 0

    def _signal_group(self, signum: int) -> None:
        try:
            os.killpg(os.getpgrp(), signum)
        except OSError as exc:
            log(f"could not signal the process group: {exc}")

    def _supervise(self, proc: subprocess.Popen, spec: JobSpec) -> int:
        """Wait for the workload, carrying out orders and signals. Main thread only."""
        assert self.collector is not None
        grace = spec.terminate_grace_s
        term_at: float | None = None  # when SIGTERM went to the group
        usr1_at: float | None = None
        killed = False
        while True:
            try:
                returncode = proc.wait(timeout=SUPERVISE_POLL_S)
                break
            except subprocess.TimeoutExpired:
                pass
            now = time.monotonic()
            if self._checkpoint_requested and usr1_at is None and term_at is None:
                usr1_at = now
                self.collector.system("checkpoint_and_exit: sending SIGUSR1 to the workload")
                self._signal_group(signal.SIGUSR1)
            checkpoint_over = usr1_at is not None and now >= usr1_at + grace
            if term_at is None and (self._stopping() or checkpoint_over):
                term_at = now
                self.collector.system("terminating: sending SIGTERM to the workload")
                # The runner gets it too; its handler only notes it.
                self._signal_group(signal.SIGTERM)
            if term_at is not None and not killed and now >= term_at + grace:
                killed = True
                self.collector.system(
                    f"the workload did not exit within {grace:g} s; sending SIGKILL"
                )
                proc.kill()
        return exit_code_of(returncode)

    def _finish(self, spec: JobSpec, exit_code: int) -> int:
        """Report the exit: exit.json, last line, flush, `exit`. The workload has ended."""
        assert self.collector is not None and self.sender is not None
        assert self.spool is not None
        write_exit_json(self.workdir, exit_code)
        if self.uploader is not None:
            # The uploads get their own final_flush_timeout_s: lines keep flowing meanwhile,
            # and lines and exit must still get theirs when an upload used all of it.
            pending = self.uploader.pending
            if pending:
                self.collector.system(f"waiting for {pending} artifact upload(s) to finish")
            if not self.uploader.drain(time.monotonic() + spec.final_flush_timeout_s):
                self.collector.system(
                    f"artifact uploads not finished within {spec.final_flush_timeout_s:g} s"
                )
        deadline = time.monotonic() + spec.final_flush_timeout_s
        self.collector.system(f"workload exited with code {exit_code}")
        self.collector.close()
        last_seq = self.collector.last_seq
        self.sender.flush_now()
        while self.spool.acked_seq < last_seq and self._abort is None:
            if time.monotonic() >= deadline:
                log(f"lines up to {last_seq} not all sent within {spec.final_flush_timeout_s} s")
                break
            time.sleep(0.02)
        if self.heartbeat is not None:
            self.heartbeat.stop()
        if self._abort is not None:
            return self._abort[0]
        try:
            if self.heartbeat is not None and not self.heartbeat.started_acked:
                pid = self.heartbeat.pid
                step = self.resumed_from_step
                call_with_retry(
                    lambda: self.client.post_started(pid, step),
                    deadline=deadline,
                    on_retry=_log_retry,
                )
            call_with_retry(
                lambda: self.client.post_exit(exit_code, last_seq),
                deadline=deadline,
                on_retry=_log_retry,
            )
        except SupersededError as exc:
            log(str(exc))
            return EXIT_OK
        except FatalError as exc:
            log(str(exc))
            return EXIT_REFUSED
        except RetryableError as exc:
            log(f"could not report the exit: {exc}")
            return EXIT_UNREPORTED
        if self.spool.acked_seq < last_seq:
            return EXIT_UNREPORTED
        return EXIT_OK

    def _shutdown(self) -> None:
        """Stop the threads (bounded waits) and close the spool."""
        if self.heartbeat is not None:
            self.heartbeat.stop()
        if self.uploader is not None:
            self.uploader.stop()
        if self.sender is not None:
            self.sender.stop()
        if self.spool is not None:
            self.spool.close()


def main() -> int:
    """Entry point of `python -m runner`; returns the runner's exit status."""
    try:
        config = load_config()
    except ConfigError as exc:
        log(str(exc))
        return EXIT_CONFIG
    status = Runner(config).run()
    sys.stdout.flush()
    sys.stderr.flush()
    return status
