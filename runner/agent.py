"""The runner's main flow, as `docs/runner-protocol.md` describes it.

1. Read the configuration (exit 2 when a variable is missing); create the workdir; take an
   exclusive non-blocking `flock` on `runner.lock` (exit 75 when another runner holds it)
   and write `runner.pid`.
2. Fetch the spec, retrying while the control plane is away; exit 2 without starting
   anything when it names a protocol version this runner does not speak (`runner.protocol`).
3. Start the workload (`runner.workload`) in the runner's own process group, with its output
   piped through the `OutputCollector` into the `Spool`; a `LogSender` thread ships spooled
   lines in batches, a `Heartbeat` thread (`runner.loops`) posts `started`, then heartbeats,
   and passes on the orders.
4. The main thread supervises: it alone sends signals. `terminate` (an order, or SIGTERM /
   SIGINT to the runner) sends SIGTERM to the process group and SIGKILLs the workload's
   processes after `terminate_grace_s`: every other member of the group, and any process
   carrying the attempt's TRAINYARD_JOB_ID and TRAINYARD_ATTEMPT that left it
   (`runner.workload.kill_leftovers`); what the workload leaves behind when it exits is
   killed the same way. SIGUSR2 to the runner ends the grace at once (a backend whose
   grace is shorter than the spec's: slurmctl's `cancel`). `checkpoint_and_exit` sends
   SIGUSR1 to the group first and terminates after the grace.
5. When the workload exits: `exit.json` is written, the readers drained, the line
   `workload exited with code N` spooled, every line flushed, `exit` posted, exit 0 — all
   within `final_flush_timeout_s`.

Exit statuses of the runner (`runner.protocol.EXIT_*`): 0 done (or superseded; the workload's
own code instead where TRAINYARD_EXIT_MESSAGE_FILE is set: `container_status`), 1 the token
was refused (401/404), 2 bad configuration or a protocol version mismatch (the spec's
`protocol_version`, or a 400 `unsupported_protocol`), 69 the control plane could not be told
of the exit within `final_flush_timeout_s` (`exit.json` still says what happened), 75 another
runner holds the workdir.

The token never reaches the workload: it comes from a file the runner deletes on reading
(`runner.config`), and the runner makes itself non-dumpable (`PR_SET_DUMPABLE` 0) first, so
a workload running as the same user cannot read the runner's `/proc/<pid>/environ` or
`/proc/<pid>/mem` either (exec makes the workload dumpable again).

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
- The working directory (`runner.workdir`): the job's code archive (`workdir`) is downloaded,
  checked and unpacked, then its inline `files` written, before the checkpoint and inputs
  are fetched. When that fails the workload does not start: a system line says why, and the
  exit code reported is 65 (EX_DATAERR), which the control plane names `workdir_invalid`.
- Artifacts (`runner.artifacts`): the checkpoint to resume from is fetched after the spec,
  before the workload starts, retrying for at most `final_flush_timeout_s`; when that fails
  the workload starts without it. Uploads run in their own thread; when the workload has
  exited, the runner waits up to `final_flush_timeout_s` for them before its last line, then
  gives lines and `exit` their own `final_flush_timeout_s`.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import shlex
import signal
import subprocess
import sys
import time
from typing import Any

from runner.artifacts import ArtifactUploader, ResumeError, checkpoint_root, fetch_resume
from runner.client import (
    ControlClient,
    FatalError,
    RetryableError,
    RetryStopped,
    StopWhen,
    SupersededError,
    UnsupportedProtocolError,
    log,
    refusal_status,
    retrying,
)
from runner.config import ConfigError, RunnerConfig, load_config
from runner.hub_door import HubDoor
from runner.inputs import InputError, fetch_inputs
from runner.loops import Heartbeat, LogSender
from runner.masking import Masker
from runner.output import OutputCollector
from runner.protocol import (
    ENV_EXIT_MESSAGE_FILE,
    ENV_HUB_CACHE,
    ENV_RESUME_FROM,
    EXIT_CONFIG,
    EXIT_LOCKED,
    EXIT_NO_INPUT,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_SIGTERM,
    EXIT_UNREPORTED,
    EXIT_WORKDIR_INVALID,
    MIN_PROTOCOL_VERSION,
    ORDER_CHECKPOINT_AND_EXIT,
    ORDER_TERMINATE,
    PROTOCOL_VERSION,
    STREAM_STDERR,
    STREAM_STDOUT,
    supported,
)
from runner.shell import HttpShellTransport, ShellEnv, ShellService
from runner.shell_spawn import unignore_sighup
from runner.spec import JobSpec, SpecError
from runner.spool import Spool
from runner.workdir import WorkdirError, prepare_workdir
from runner.workload import (
    exit_code_of,
    kill_leftovers,
    leftovers,
    prepare,
    spawn,
    start_failure_code,
    workload_env,
    workload_markers,
    write_exit_json,
    write_exit_message,
)

READER_DRAIN_TIMEOUT_S = 2.0
SUPERVISE_POLL_S = 0.1
PR_SET_DUMPABLE = 4  # <linux/prctl.h>


class Runner:
    """One run of the agent on one workdir. `run()` returns the runner's exit status."""

    def __init__(self, config: RunnerConfig, *, client: ControlClient | None = None) -> None:
        self.config = config
        self.workdir = config.workdir
        self.client = client or ControlClient(
            config.control_url,
            config.job_id,
            config.token,
            relay_url=config.relay_url,
            control_socket=config.control_socket,
        )
        # Written by signal handlers and other threads, read by the main thread; plain
        # attributes, because a signal handler must not take a lock the main thread holds.
        self._terminate_requested = False
        self._checkpoint_requested = False
        self._kill_requested = False  # SIGUSR2: the grace is over (slurmctl's cancel)
        self._abort: tuple[int, str] | None = None
        self._lock_fh: Any = None
        self.spool: Spool | None = None
        self.collector: OutputCollector | None = None
        self.sender: LogSender | None = None
        self.heartbeat: Heartbeat | None = None
        self.uploader: ArtifactUploader | None = None
        self.hub_door: HubDoor | None = None
        # Shell sessions into the job (runner.shell): threads only once the hint comes.
        self.shell = ShellService(HttpShellTransport(self.client))
        # The checkpoint step the workload resumes from; None when it starts from scratch.
        self.resumed_from_step: int | None = None
        # What only the workload's processes carry in their environment (workload_markers).
        self._markers: list[str] = []
        # Ends the main thread's retries, and cuts their sleeps short, on a terminate.
        self._retry_stop = StopWhen(self._stopping, self._sleep_unless_stopping)

    # -- requests from other threads and signals -----------------------------------------

    def abort(self, status: int, reason: str) -> None:
        """A thread was refused (401/404) or superseded: stop the workload, exit `status`."""
        if self._abort is None:
            self._abort = (status, reason)
            log(f"stopping: {reason}")

    def _batch_answered(self, answer: dict) -> None:
        heartbeat = self.heartbeat
        if heartbeat is not None:
            heartbeat.heard(answer)
        self.shell.hint(answer)

    def order(self, order: str) -> None:
        if order == ORDER_TERMINATE:
            self._terminate_requested = True
        elif order == ORDER_CHECKPOINT_AND_EXIT:
            self._checkpoint_requested = True
        else:
            log(f"ignoring unknown order {order!r}")

    def _on_terminate_signal(self, signum: int, frame: object) -> None:
        self._terminate_requested = True

    def _on_kill_signal(self, signum: int, frame: object) -> None:
        self._terminate_requested = True
        self._kill_requested = True

    def _on_usr1(self, signum: int, frame: object) -> None:
        # The runner shares the workload's group, so it receives the SIGUSR1 it sends. A
        # handler rather than SIG_IGN: an ignored signal stays ignored across exec, and a
        # bash workload could then not even trap it.
        pass

    def _install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, self._on_terminate_signal)
        signal.signal(signal.SIGINT, self._on_terminate_signal)
        signal.signal(signal.SIGUSR1, self._on_usr1)
        signal.signal(signal.SIGUSR2, self._on_kill_signal)
        unignore_sighup()

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
        write_exit_message('{"started": true}\n')
        return True

    def _run_locked(self) -> int:
        try:
            answer = retrying(self.client.get_spec, stop=self._retry_stop)
        except UnsupportedProtocolError as exc:
            log(
                f"{exc}: the control plane does not speak runner protocol version "
                f"{PROTOCOL_VERSION}; the workload never started"
            )
            return refusal_status(exc)
        except (SupersededError, FatalError) as exc:
            log(str(exc))
            return refusal_status(exc)
        except RetryStopped:
            log("terminated before the spec arrived; the workload never started")
            write_exit_json(self.workdir, EXIT_SIGTERM)
            return EXIT_OK
        spec = JobSpec.from_json(answer)
        if spec.protocol_version is None or not supported(spec.protocol_version):
            log(
                f"the spec is of runner protocol version {answer.get('protocol_version')!r}, "
                f"this runner speaks {MIN_PROTOCOL_VERSION} to {PROTOCOL_VERSION}: not starting "
                "the workload (a newer runner is needed)"
            )
            return EXIT_CONFIG
        assert self.spool is not None
        sender = LogSender(
            self.client,
            self.spool,
            max_lines=spec.log_batch_max_lines,
            max_interval_s=spec.log_batch_max_interval_s,
            on_abort=self.abort,
            gzip_min_bytes=spec.log_gzip_min_bytes,
            on_answer=self._batch_answered,
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
            logs=sender,
        )
        self.uploader = uploader
        collector.on_stdout_line = uploader.offer
        uploader.start()
        sender.start()
        collector.system("fetched spec")
        has_code = spec.workdir is not None or bool(spec.files)
        if has_code and not self._prepare_workdir(spec):
            proc, exit_code = None, EXIT_WORKDIR_INVALID
        else:
            if spec.resume_from is not None and self._abort is None:
                self._resume(spec)
            if spec.inputs is not None and self._abort is None and not self._fetch_inputs(spec):
                proc, exit_code = None, EXIT_NO_INPUT
            else:
                proc, exit_code = self._start_workload(spec)
        if proc is not None:
            exit_code = self._supervise(proc, spec)
            self.shell.close(timeout=0)  # sessions end with the workload
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
        spec.env[ENV_RESUME_FROM] = str(directory)
        self.resumed_from_step = step
        self.collector.system(f"resuming from checkpoint at step {step}")

    def _prepare_workdir(self, spec: JobSpec) -> bool:
        """Unpack the job's code archive and write its inline files into the working
        directory; False (with a system line saying why) when the workload cannot start."""
        assert self.collector is not None
        try:
            summary = prepare_workdir(
                self.client,
                spec.workdir,
                spec.files,
                workdir=self.workdir,
                work=self.workdir / "work",
                deadline=time.monotonic() + spec.final_flush_timeout_s,
                should_stop=self._stopping,
                sleep=self._sleep_unless_stopping,
            )
        except SupersededError as exc:
            self.abort(EXIT_OK, str(exc))
            return True  # _start_workload sees the abort and starts nothing
        except WorkdirError as exc:
            if self._stopping():  # terminated meanwhile: _start_workload says so
                return True
            self.collector.system(
                f"could not prepare the working directory: {exc}; not starting the workload"
            )
            return False
        if summary:
            self.collector.system(f"working directory: {summary}")
        return True

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
        self._open_hub(spec)
        try:
            argv, env = prepare(spec, self.workdir)
        except (SpecError, OSError) as exc:
            self.collector.system(f"cannot start the workload: {exc}")
            return None, EXIT_NOT_FOUND
        if self._stopping():
            self.collector.system("terminated before the workload started")
            return None, EXIT_SIGTERM
        self.collector.system(f"starting workload: {shlex.join(argv)}")
        try:
            self._markers = workload_markers(env)
            proc = spawn(argv, self.workdir / "work", env)
        except OSError as exc:
            self.collector.system(f"cannot start the workload: {exc}")
            return None, start_failure_code(exc)
        assert proc.stdout is not None and proc.stderr is not None
        self.collector.start_reader(proc.stdout, STREAM_STDOUT)
        self.collector.start_reader(proc.stderr, STREAM_STDERR)
        # Sessions run where the workload does: its environment, its directory.
        self.shell.configure(ShellEnv(env=dict(env), cwd=str(self.workdir / "work")))
        heartbeat = Heartbeat(
            self.client,
            pid=proc.pid,
            resumed_from_step=self.resumed_from_step,
            interval_s=spec.heartbeat_interval_s,
            last_seq=lambda: self.collector.last_seq if self.collector else 0,
            on_order=self.order,
            on_abort=self.abort,
            on_answer=self.shell.hint,
        )
        self.heartbeat = heartbeat
        heartbeat.start()
        return proc, 0

    def _open_hub(self, spec: JobSpec) -> None:
        """HF_ENDPOINT for the workload, when the control plane offers its hub: the control
        URL's hub, or, for a runner that talks through a socket (a network of its own), a
        door on the workload's loopback that carries the hub's reads over the socket. And
        the provider's cache for the organization, unless the job names its own."""
        cache = os.environ.get(ENV_HUB_CACHE, "")
        if cache and not {"HF_HOME", "HF_HUB_CACHE"} & spec.env.keys():
            spec.env["HF_HUB_CACHE"] = cache
        if spec.hub_path is None:
            return
        if self.config.control_socket is None:
            spec.env["HF_ENDPOINT"] = self.config.control_url + spec.hub_path
            return
        try:
            self.hub_door = HubDoor(self.config.control_socket, spec.hub_path).start()
        except OSError as exc:
            assert self.collector is not None
            self.collector.system(f"the hub is not reachable from the workload: {exc}")
            return
        spec.env["HF_ENDPOINT"] = self.hub_door.endpoint

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
                self.shell.close(timeout=0)  # no session outlives a terminate
                self.collector.system("terminating: sending SIGTERM to the workload")
                # The runner gets it too; its handler only notes it.
                self._signal_group(signal.SIGTERM)
            over = self._kill_requested or (term_at is not None and now >= term_at + grace)
            if term_at is not None and not killed and over:
                killed = True
                self.collector.system(
                    f"the workload did not exit within {grace:g} s; sending SIGKILL"
                )
                proc.kill()
                kill_leftovers(self._markers)
        # What the workload left behind (a child that ignores SIGTERM, or a background
        # process) outlives the attempt otherwise: a terminate gives it the rest of the
        # grace, then it is killed, like all of it after a normal exit.
        if term_at is not None and not killed:
            deadline = term_at + grace
            while leftovers(self._markers) and time.monotonic() < deadline:
                time.sleep(SUPERVISE_POLL_S)
        kill_leftovers(self._markers)
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
                retrying(lambda: self.client.post_started(pid, step), deadline=deadline)
            retrying(lambda: self.client.post_exit(exit_code, last_seq), deadline=deadline)
        except (SupersededError, FatalError) as exc:
            log(str(exc))
            return refusal_status(exc)
        except RetryableError as exc:
            log(f"could not report the exit: {exc}")
            return EXIT_UNREPORTED
        if self.spool.acked_seq < last_seq:
            return EXIT_UNREPORTED
        return container_status(exit_code)

    def _shutdown(self) -> None:
        """Stop the threads (bounded waits) and close the spool."""
        self.shell.close()
        if self.heartbeat is not None:
            self.heartbeat.stop()
        if self.uploader is not None:
            self.uploader.stop()
        if self.sender is not None:
            self.sender.stop()
        if self.hub_door is not None:
            self.hub_door.stop()
        if self.spool is not None:
            self.spool.close()


def make_undumpable() -> bool:
    """Make this process non-dumpable (Linux): other processes of its user, the workload
    among them, can no longer read its /proc/<pid>/environ or /proc/<pid>/mem nor ptrace
    it. Best effort: False where prctl is not there."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def container_status(exit_code: int) -> int:
    """The runner's own status once the workload's exit was reported: 0, or, where the
    backend reads the container's status (it named an exit message file: Kubernetes), the
    workload's code, so a pod whose workload failed (a SIGTERM from a preemption: 143) is a
    Failed pod, which the Job's pod failure policy judges."""
    if not os.environ.get(ENV_EXIT_MESSAGE_FILE, "").strip():
        return EXIT_OK
    return exit_code if 0 <= exit_code <= 255 else 1


def main() -> int:
    """Entry point of `python -m runner`; returns the runner's exit status."""
    make_undumpable()  # before the token is read
    try:
        config = load_config()
    except ConfigError as exc:
        log(str(exc))
        return EXIT_CONFIG
    status = Runner(config).run()
    sys.stdout.flush()
    sys.stderr.flush()
    return status
