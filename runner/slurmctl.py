"""The Slurm side of the `slurm` backend: run on a login node (any host with the Slurm client
commands and the shared work directory) as `python3 runner-….pyz slurmctl OP ARGS...`.
Each op prints one JSON object on stdout and exits 0; a failure prints
`{"error": message, "retryable": bool}` and exits 1 (`retryable`: the controller did not
answer, try again later).

Ops:
- `submit WORKDIR` (stdin: a JSON object, `SUBMIT_KEYS`): one batch job per attempt, never
  two. Under a lock on WORKDIR/launch.lock, an attempt that already has a job (its
  `handle.json`, or a job of its name in `squeue`) gets that job back and nothing is
  submitted. Otherwise the runner token goes to WORKDIR/runner.token (0600, created
  exclusively), `batch.sh` runs the runner with only that file's path
  (TRAINYARD_RUNNER_TOKEN_FILE), `sbatch` submits it, and `handle.json` records the job.
  The token is in no script, argv, environment, Slurm job record or output file.
- `poll WORKDIR JOBID [NAME]`: `{"state", "exit_code", "detail"}` as `PollResult` has them
  (see `poll`).
- `poll-many` (stdin: `{"handles": [{"workdir", "job_id", "name"}, ...]}`): `{"results":
  [...]}`, `poll`'s answer for each handle in order, from one `squeue` for all of them (the
  reconcile pass: one round trip to the login node per provider, not one per attempt); a
  malformed handle gets `{"error", "retryable"}` in its place.
- `cancel JOBID GRACE [NAME [USER HELPER]]`: SIGTERM to every process of the job now (a
  pending job is cancelled at once); after GRACE seconds a detached helper sends SIGUSR2
  to the runner (it kills its workload's process group), then SIGKILL and cancel
  `RUNNER_KILL_MARGIN_S` later; returns at once.
- `release JOBID WORKDIR [NAME [USER HELPER]]`: kill and cancel the job (idempotent), then
  delete WORKDIR (nothing a workload planted there reaches a later tenant) and the
  attempt's user.

USER and HELPER: the job of an attempt user (spec `user`/`helper` at submit): the Slurm
commands that act on it run as that user through the root helper's `exec`
(runner/attempt_user.py), which also creates the user at submit and removes it at release.
The batch job runs the bundle only when its sha256 is the spec's (`runner.verify`).

NAME, the attempt's job name, makes poll, cancel and release act on JOBID only while it is
that job: a controller that lost its state (a crash before it saved) hands the numbers of
the jobs it forgot to new ones.
- `diagnostics WORKDIR`: `{"lines": [...]}`, the tail of the job's output and runner log.
- `sinfo`: `{"partitions": [...]}`: each partition's name, whether it is the default, its
  availability, node states and CPU counts.

Standard library only (python3 >= 3.9 on the login node, nothing installed).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# The work directory's files are the host runtime's: one lock, handle, token and exit record.
from runner.hostctl import (
    HANDLE_FILE,
    LOCK_FILE,
    RUN_DIR,
    TOKEN_FILE,
    call_helper,
    helper_argv,
    locked,
    read_handle,
    recorded_exit,
    write_json,
    write_token,
)
from runner.verify import verified_argv

RUNNER_PID_FILE = "runner.pid"
BATCH_SCRIPT = "batch.sh"
OUTPUT_PATTERN = "slurm-%j.out"
COMMAND_TIMEOUT_S = 60.0
DIAGNOSTIC_LINES = 40
EXIT_SIGTERM = 143  # runner.protocol's: terminated, or never started because terminated
# At the end of cancel's grace the runner gets SIGUSR2 (kill the workload's whole process
# group now), and SIGKILL this long after: Slurm's kill of the batch step does not reach
# what the runner's death orphaned (proctrack/linuxproc).
RUNNER_KILL_MARGIN_S = 1.0

SUBMIT_KEYS = (
    "token",  # the runner token: written to runner.token, nowhere else
    "env",  # the runner's environment (names to values), without the token
    "python",  # the interpreter on the compute node
    "bundle",  # this zipapp's path, on the shared filesystem
    "job_name",
    "partition",  # optional, like the rest
    "account",
    "time_minutes",
    "gres",  # e.g. "gpu:2"
    "cpus",  # CPUs per task
    "sha256",  # the bundle's: the batch job runs it only when it matches (runner.verify)
    "user",  # with `helper`: the attempt's own Unix user (see `submit`)
    "helper",
)
# What Slurm's commands run as an attempt user keep of slurmctl's environment.
SLURM_ENV = ("SLURM_CONF", "PATH")

# squeue's %T, by what poll answers for it.
QUEUED = {"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"}
RUNNING = {"RUNNING", "COMPLETING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT", "RESIZING"}
RECLAIMED = {"PREEMPTED", "NODE_FAIL", "BOOT_FAIL"}
# Anything else (COMPLETED, FAILED, TIMEOUT, CANCELLED, OUT_OF_MEMORY, DEADLINE, ...) ended.

# Of the batch job's own environment, what the runner and its workload keep: which job and
# node this is, and the devices Slurm gave it. Everything else is the backend's env.
KEPT_FROM_SLURM = (
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "TMPDIR",
    "SLURM_JOB_ID",
    "SLURM_JOB_NAME",
    "SLURM_JOB_PARTITION",
    "SLURM_JOB_NODELIST",
    "SLURM_JOB_NUM_NODES",
    "SLURM_CPUS_ON_NODE",
    "SLURM_JOB_CPUS_PER_NODE",
    "SLURM_JOB_GPUS",
    "SLURM_GPUS_ON_NODE",
    "SLURM_CLUSTER_NAME",
    "SLURMD_NODENAME",
    "CUDA_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "GPU_DEVICE_ORDINAL",
)
# Slurm's words for a controller that did not answer: worth trying again.
TRANSIENT_ERRORS = (
    "unable to contact slurm controller",
    "socket timed out",
    "timed out",
    "connection refused",
    "resource temporarily unavailable",
    "try again",
    "slurm_persist_conn",
    "zero bytes were transmitted",
)


class SlurmError(Exception):
    def __init__(self, message: str, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable


# -- running Slurm's commands ------------------------------------------------------------


def _slurm(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as exc:
        raise SlurmError(f"{argv[0]} timed out after {COMMAND_TIMEOUT_S:g}s", True) from exc
    except OSError as exc:
        raise SlurmError(f"could not run {argv[0]}: {exc.strerror}") from exc


def _failure(argv: Sequence[str], result: subprocess.CompletedProcess[str]) -> SlurmError:
    message = (result.stderr or result.stdout).strip() or f"exit status {result.returncode}"
    transient = any(words in message.lower() for words in TRANSIENT_ERRORS)
    return SlurmError(f"{argv[0]} failed: {message}", transient)


def _checked(argv: Sequence[str]) -> str:
    result = _slurm(argv)
    if result.returncode != 0:
        raise _failure(argv, result)
    return result.stdout


def _gone(result: subprocess.CompletedProcess[str]) -> bool:
    """Whether squeue/scontrol said the job id is unknown (it left the controller)."""
    return "invalid job id" in (result.stderr + result.stdout).lower()


# -- files of the work directory ---------------------------------------------------------


def batch_script(
    workdir: Path, python: str, bundle: str, env: dict[str, str], sha256: str | None = None
) -> str:
    """The batch job: the runner, in an environment of `env`, the token file's path and
    what `KEPT_FROM_SLURM` keeps of the job's own; never the token. With `sha256`, the
    bundle runs only when it is that one (a job that finds another exits 86)."""
    assignments = {**env, "TRAINYARD_RUNNER_TOKEN_FILE": str(workdir / TOKEN_FILE)}
    assignments["TRAINYARD_WORKDIR"] = str(workdir)
    lines = [
        "#!/bin/sh",
        "# Trainyard: one attempt's runner. Its token is in runner.token (mode 0600), which",
        "# the runner reads and deletes before its workload starts.",
        f"cd {shlex.quote(str(workdir))} || exit 1",
        "exec env -i \\",
    ]
    # ${NAME+"NAME=$NAME"}: the name only where the job has it.
    lines += [f'  ${{{name}+"{name}=${name}"}} \\' for name in KEPT_FROM_SLURM if name not in env]
    lines += [f"  {shlex.quote(f'{name}={value}')} \\" for name, value in assignments.items()]
    runner = verified_argv(python, bundle, sha256) if sha256 else [python, bundle]
    lines.append("  " + " ".join(shlex.quote(part) for part in runner))
    return "\n".join(lines) + "\n"


# -- ops ---------------------------------------------------------------------------------


def _jobs_named(name: str) -> list[str]:
    argv = ["squeue", "-h", "--states", "all", "--name", name, "-o", "%i"]
    return _checked(argv).split()


def as_attempt_user(user: str | None, helper: str | None, argv: Sequence[str]) -> list[str]:
    """`argv` run as the attempt's user (through the root helper's `exec`, with SLURM_ENV of
    this environment: sudo resets it), or as is without one."""
    if not user or not helper:
        return list(argv)
    env = [f"{name}={os.environ[name]}" for name in SLURM_ENV if name in os.environ]
    return [*helper_argv(helper), "exec", user, "/usr/bin/env", "-i", *env, *argv]


def submit(workdir: Path, spec: dict[str, Any]) -> dict[str, Any]:
    """The attempt's handle: its Slurm job, submitted now unless it already has one.

    With `user` and `helper` (the root helper, runner/attempt_user.py), the job is the
    attempt user's own: the helper creates the user, WORKDIR/run (token, output, the
    runner's work directory) becomes its, and sbatch runs as it, so the job (and its
    workload) runs as that uid. WORKDIR (lock, handle, batch.sh) stays slurmctl's user's."""
    name = str(spec["job_name"])
    user, helper = spec.get("user"), spec.get("helper")
    if bool(user) != bool(helper):
        raise SlurmError("submit: `user` and `helper` go together")
    workdir.mkdir(parents=True, exist_ok=True)
    with locked(workdir / LOCK_FILE):
        existing = read_handle(workdir)
        if existing is not None:
            return existing
        jobs = _jobs_named(name)
        job_id = jobs[0] if jobs else _sbatch(workdir, name, spec)
        handle = {"job_id": job_id, "name": name, "workdir": str(workdir)}
        if user:
            handle.update(user=user, helper=helper, run=str(workdir / RUN_DIR))
        write_json(workdir / HANDLE_FILE, handle)
        return handle


def _sbatch(workdir: Path, name: str, spec: dict[str, Any]) -> str:
    user, helper = spec.get("user"), spec.get("helper")
    run = workdir / RUN_DIR if user else workdir
    run.mkdir(exist_ok=True, mode=0o700)
    token_file = write_token(run, str(spec["token"]))
    script = workdir / BATCH_SCRIPT
    env = {str(key): str(value) for key, value in (spec.get("env") or {}).items()}
    python, bundle = str(spec.get("python") or "python3"), str(spec["bundle"])
    script.write_text(batch_script(run, python, bundle, env, spec.get("sha256")))
    script.chmod(0o755 if user else 0o700)  # no secret in it; the attempt user submits it
    if user:
        workdir.chmod(0o711)  # the attempt user passes through; only `run` is its own
        try:
            call_helper(str(helper), "add", str(user))
            call_helper(str(helper), "own", str(user), str(run))
        except OSError as exc:
            token_file.unlink(missing_ok=True)
            raise SlurmError(f"the attempt's user: {exc}") from exc
    argv = [
        "sbatch",
        "--parsable",
        "--no-requeue",
        f"--job-name={name}",
        "--export=NONE",
        f"--output={run / OUTPUT_PATTERN}",
        f"--chdir={run}",
    ]
    for key, option in (("partition", "--partition"), ("account", "--account")):
        if spec.get(key):
            argv.append(f"{option}={spec[key]}")
    if spec.get("time_minutes"):
        argv.append(f"--time={int(spec['time_minutes'])}")
    if spec.get("gres"):
        argv.append(f"--gres={spec['gres']}")
    if spec.get("cpus"):
        argv.append(f"--cpus-per-task={int(spec['cpus'])}")
    argv.append(str(script))
    try:
        output = _checked(as_attempt_user(user, helper, argv))
    except SlurmError as exc:
        # A refusal submitted nothing: no runner will read the token. After a time-out the
        # job may exist all the same, and the launch that is tried again adopts it (by its
        # name), so its runner still finds the token.
        if not exc.retryable:
            token_file.unlink(missing_ok=True)
        raise
    return output.strip().split(";")[0]


def _exit_code_of(job_id: str) -> tuple[int | None, str]:
    """The job's exit code as Slurm has it (`ExitCode=code:signal`; a signal counts as
    128 + it), and its state; (None, "") once Slurm has forgotten the job."""
    result = _slurm(["scontrol", "show", "job", "-o", job_id])
    if result.returncode != 0:
        return None, ""
    fields = dict(
        item.split("=", 1) for item in result.stdout.split() if "=" in item and item[0].isupper()
    )
    code, _, signum = fields.get("ExitCode", "").partition(":")
    try:
        number = 128 + int(signum) if int(signum or 0) else int(code)
    except ValueError:
        number = None
    return number, fields.get("JobState", "")


# squeue's fields for poll: job id, state, reason, nodes, name (last: a name may hold `|`).
SQUEUE_FORMAT = "%i|%T|%r|%N|%j"
# At most this many job ids per squeue in poll-many (one argv stays far below the limits).
SQUEUE_BATCH = 1000


def _squeue(job_ids: Sequence[str]) -> dict[str, tuple[str, str, str, str]]:
    """squeue's `(state, reason, nodes, name)` of each of `job_ids` it still lists: one
    squeue for all of them. A job gone from squeue is missing from the answer."""
    found: dict[str, tuple[str, str, str, str]] = {}
    for start in range(0, len(job_ids), SQUEUE_BATCH):
        chunk = list(job_ids[start : start + SQUEUE_BATCH])
        asked = set(chunk)
        argv = ["squeue", "-h", "--states", "all", "-j", ",".join(chunk), "-o", SQUEUE_FORMAT]
        result = _slurm(argv)
        if result.returncode != 0 and not _gone(result):
            raise _failure(argv, result)
        for line in result.stdout.splitlines():
            job_id, state, reason, nodes, name = [*line.strip().split("|", 4), "", "", ""][:5]
            if job_id in asked:
                found.setdefault(job_id, (state, reason, nodes, name))
    return found


def poll(workdir: Path, job_id: str, name: str | None = None) -> dict[str, Any]:
    """What became of the job: `queued` (Slurm's reason in `detail`), `running`,
    `reclaimed` (preempted, its node failed), or once it ended `exited` with the code the
    runner recorded. A job that ended with no exit record is `lost` when its runner had
    started (killed, out of memory), and `exited` with Slurm's exit code when the runner
    never ran (no python3 on the node: the batch script's own failure, in the output file);
    a job cancelled before it ran exits 143. Gone from squeue: exit.json's code, else lost.

    With `name`, a job of that id but another name is not this one: a controller that lost
    its state gives the numbers of the jobs it forgot to new jobs; this one is gone."""
    return _state_of(workdir, job_id, name, _squeue([job_id]).get(job_id))


def poll_many(handles: Sequence[Any]) -> list[dict[str, Any]]:
    """`poll` of every handle (`{"workdir", "job_id", "name"}`), in order, with one squeue
    for all of them (then each one's exit record, and scontrol only for a job whose runner
    never ran). A handle that cannot be polled (malformed) answers `{"error", "retryable":
    false}` in its place; squeue failing fails the whole op, as for `poll`."""
    wanted = [
        str(handle["job_id"])
        for handle in handles
        if isinstance(handle, dict) and isinstance(handle.get("job_id"), (str, int))
    ]
    records = _squeue(list(dict.fromkeys(wanted)))
    results: list[dict[str, Any]] = []
    for handle in handles:
        try:
            job_id = str(handle["job_id"])
            workdir = Path(str(handle.get("run") or handle["workdir"]))
            name = handle.get("name") or None
            results.append(_state_of(workdir, job_id, name, records.get(job_id)))
        except (KeyError, TypeError, ValueError, OSError) as exc:
            results.append({"error": f"{type(exc).__name__}: {exc}", "retryable": False})
        except SlurmError as exc:
            results.append({"error": str(exc), "retryable": exc.retryable})
    return results


def _state_of(
    workdir: Path, job_id: str, name: str | None, record: tuple[str, str, str, str] | None
) -> dict[str, Any]:
    """`poll`'s answer for the job, from squeue's `record` of it (None: not listed)."""
    state, reason, nodes, found_name = record or ("", "", "", "")
    if name and state and found_name != name:
        state = ""  # the number is another job's now
    if state in QUEUED:
        # "None": Slurm has not looked at the job yet; the state says as much.
        detail = reason if reason and reason != "None" else state
        return {"state": "queued", "exit_code": None, "detail": detail}
    if state in RUNNING:
        return {"state": "running", "exit_code": None, "detail": nodes}
    if state in RECLAIMED:
        return {"state": "reclaimed", "exit_code": None, "detail": f"Slurm job {state}"}
    recorded = recorded_exit(workdir)
    if recorded is not None:
        return {"state": "exited", "exit_code": recorded, "detail": state}
    if not state:
        detail = f"Slurm job {job_id} is gone and the runner left no exit record"
        return {"state": "lost", "exit_code": None, "detail": detail}
    if (workdir / RUNNER_PID_FILE).exists():
        detail = f"Slurm job {job_id} ended {state} and the runner left no exit record"
        return {"state": "lost", "exit_code": None, "detail": detail}
    code, _ = _exit_code_of(job_id)
    if state == "CANCELLED" and not code:
        code = EXIT_SIGTERM  # cancelled before anything ran
    if code is None:
        code = -1
    return {"state": "exited", "exit_code": code, "detail": f"Slurm job {state}"}


def _scancel(job_id: str, name: str | None, *options: str, owner: Sequence[str] = ()) -> None:
    """scancel the job, only while it is the one named `name` (when given); errors (a job
    that already ended, or is unknown) are no-ops. `owner`: (user, helper) of an attempt
    user's job, which scancel then runs as (only root or the job's user may cancel it)."""
    argv = ["scancel", *options, *([f"--name={name}"] if name else []), job_id]
    _slurm(as_attempt_user(*(owner or (None, None)), argv))


def cancel(
    job_id: str, grace_s: float, name: str | None = None, owner: Sequence[str] = ()
) -> dict[str, Any]:
    """SIGTERM to the job's processes (a pending job is cancelled outright); after the
    grace period a detached helper tells the runner to kill its workload's process group
    (SIGUSR2), then `RUNNER_KILL_MARGIN_S` later SIGKILLs what is left and cancels the job."""
    _scancel(job_id, name, "--state=PENDING", owner=owner)
    _scancel(job_id, name, "--signal=TERM", "--full", owner=owner)
    # SIGKILL to the batch step ends the job at once (FAILED; slurmstepd kills what is left
    # of the step); a plain scancel, or SIGKILL with --full, is a cancel that waits out
    # KillWait first.
    target = " ".join(shlex.quote(part) for part in ([f"--name={name}"] if name else []) + [job_id])
    scancel = " ".join(
        shlex.quote(part) for part in as_attempt_user(*(owner or (None, None)), ["scancel"])
    )
    later = (
        f"sleep {max(0.0, float(grace_s)):g}; "
        f"{scancel} --signal=USR2 --batch {target} 2>/dev/null; sleep {RUNNER_KILL_MARGIN_S:g}; "
        f"{scancel} --signal=KILL --batch {target} 2>/dev/null; {scancel} {target} 2>/dev/null"
    )
    subprocess.Popen(
        ["sh", "-c", later],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
    )
    return {"cancelled": job_id}


def release(
    job_id: str, workdir: Path, name: str | None = None, owner: Sequence[str] = ()
) -> dict[str, Any]:
    """Nothing of the attempt outlives it: its processes are SIGKILLed, the job cancelled
    (both no-ops on an ended job), an attempt user's every process here killed and the
    user deleted (the root helper's `remove`), and the attempt's work directory deleted:
    nothing its workload planted there reaches a later tenant."""
    _scancel(job_id, name, "--signal=KILL", "--batch", owner=owner)
    _scancel(job_id, name, owner=owner)
    if owner:
        user, helper = owner
        try:
            call_helper(helper, "remove", user, str(workdir / RUN_DIR))
        except OSError as exc:
            raise SlurmError(f"release: the attempt's user: {exc}", True) from exc
    shutil.rmtree(workdir, ignore_errors=True)
    with contextlib.suppress(OSError):
        workdir.parent.rmdir()  # the job's directory, once its last attempt is gone
    return {"released": job_id}


def _tail(path: Path, count: int) -> list[str]:
    try:
        with open(path, errors="replace") as handle:
            return [line.rstrip("\n") for line in handle.readlines()[-count:]]
    except OSError:
        return []


def diagnostics(workdir: Path) -> dict[str, Any]:
    """The last lines of the job's output file(s) and of the runner's log."""
    lines: list[str] = []
    outputs = [*sorted(workdir.glob("slurm-*.out")), *sorted(workdir.glob("run/slurm-*.out"))]
    for path in [*outputs, workdir / "runner.log", workdir / RUN_DIR / "runner.log"]:
        tail = _tail(path, DIAGNOSTIC_LINES)
        if tail:
            lines.append(f"--- {path.name}")
            lines.extend(tail)
    return {"lines": lines}


def sinfo() -> dict[str, Any]:
    """Every partition: its name, whether it is the default, its availability, the states
    of its nodes and its CPUs (allocated, idle, total)."""
    output = _checked(["sinfo", "-h", "-o", "%P|%a|%D|%T|%C"])
    partitions: dict[str, dict[str, Any]] = {}
    for line in output.splitlines():
        fields = line.strip().split("|")
        if len(fields) != 5:
            continue
        name, available, nodes, state, cpus = fields
        default = name.endswith("*")
        name = name.rstrip("*")
        entry = partitions.setdefault(
            name,
            {
                "name": name,
                "default": default,
                "available": available,
                "nodes": 0,
                "states": {},
                "cpus_allocated": 0,
                "cpus_idle": 0,
                "cpus_total": 0,
            },
        )
        entry["nodes"] += int(nodes)
        entry["states"][state] = entry["states"].get(state, 0) + int(nodes)
        allocated, idle, _other, total = (int(part) for part in cpus.split("/"))
        entry["cpus_allocated"] += allocated
        entry["cpus_idle"] += idle
        entry["cpus_total"] += total
    return {"partitions": list(partitions.values())}


# -- the command line --------------------------------------------------------------------

USAGE = (
    "usage: slurmctl submit WORKDIR < spec.json | poll WORKDIR JOBID [NAME] | "
    "poll-many < handles.json | "
    "cancel JOBID GRACE [NAME [USER HELPER]] | release JOBID WORKDIR [NAME [USER HELPER]] | "
    "diagnostics WORKDIR | sinfo"
)


def _dispatch(argv: Sequence[str]) -> dict[str, Any]:
    op, args = (argv[0], list(argv[1:])) if argv else ("", [])
    conf = os.environ.get("SLURM_CONF")
    if conf and not os.path.isfile(conf):  # Slurm's commands would retry it for a minute
        raise SlurmError(f"SLURM_CONF {conf} is not a file")
    if op == "submit" and len(args) == 1:
        return submit(Path(args[0]), json.loads(sys.stdin.read()))
    if op == "poll-many" and not args:
        request = json.loads(sys.stdin.read())
        handles = request.get("handles") if isinstance(request, dict) else None
        if not isinstance(handles, list):
            raise SlurmError('poll-many reads {"handles": [...]} on stdin')
        return {"results": poll_many(handles)}
    name = args[2] if len(args) >= 3 else None  # the job's name, optional
    owner = args[3:5] if len(args) == 5 else []  # an attempt user's job: (user, helper)
    if op == "poll" and len(args) in (2, 3):
        return poll(Path(args[0]), args[1], name)
    if op == "cancel" and len(args) in (2, 3, 5):
        return cancel(args[0], float(args[1]), name, owner)
    if op == "release" and len(args) in (2, 3, 5):
        return release(args[0], Path(args[1]), name, owner)
    if op == "diagnostics" and len(args) == 1:
        return diagnostics(Path(args[0]))
    if op == "sinfo" and not args:
        return sinfo()
    raise SlurmError(USAGE)


def main(argv: Sequence[str]) -> int:
    """Run one op; print its JSON answer (or `{"error", "retryable"}`) on stdout."""
    try:
        answer = _dispatch(argv)
    except SlurmError as exc:
        print(json.dumps({"error": str(exc), "retryable": exc.retryable}))
        return 1
    except (OSError, ValueError, KeyError) as exc:
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}", "retryable": False}))
        return 1
    print(json.dumps(answer))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main(sys.argv[1:]))
