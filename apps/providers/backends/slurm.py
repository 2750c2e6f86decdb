"""The Slurm provider: each attempt is one batch job on a Slurm cluster.

Everything on the cluster's side is done by `runner.slurmctl` (`python3 runner-….pyz
slurmctl OP`), run on the login node through a Transport: here (LocalTransport) when this
host is a Slurm client of the cluster. The runner zipapp is installed once in the shared work
directory; the batch job runs it on the compute node.

Config keys (the Provider's `config`):
- `partition`: the partition jobs go to (default: the cluster's default partition).
- `account`: the Slurm account to charge (`--account`), optional.
- `work_dir` (required): a directory on a filesystem that the login node and every compute
  node see at the same path. Each attempt gets `<work_dir>/<job id>/attempt-<n>`; the runner
  bundle lives in `<work_dir>/.trainyard/`.
- `python`: the interpreter on the compute nodes (default `python3`, >= 3.9, standard
  library only); also runs slurmctl on the login node.
- `pythonpath`: the runner's PYTHONPATH, optional (workloads that import `trainer/` from a
  checkout on the shared filesystem, say).
- `path`: the runner's PATH (default `/usr/local/bin:/usr/bin:/bin`, after the directory of
  an absolute `python`).
- `slots`: the capacity `offers()` reports (default: the partition's CPUs for `cpu`, else 1).
- `accelerator`: the catalog accelerator the cluster has (default `cpu`), and `gpu_counts`
  the GPUs per job it offers (default [1]). An attempt of a GPU accelerator asks for
  `--gres=gpu:<gpu count>`.
- `cpus`: CPUs per attempt (`--cpus-per-task`), optional.
- `slurm_conf`: the SLURM_CONF the Slurm commands use, optional (default: the environment's,
  else Slurm's own default).
- `isolation`: `none` (default: every job runs as slurmctl's user) or `users`: each attempt's
  job runs as a Unix user of its own, created at submit and removed at release by the root
  helper `runner/attempt_user.py` (config `attempt_user_helper`, default
  /usr/local/sbin/trainyard-attempt-user; see docs/adding-a-provider.md). The user must
  exist on the compute node too: as the helper creates it locally, that holds where the
  login node is the compute node (one-node clusters); a bigger cluster needs the helper's
  `add` to reach its user directory (not shipped).
- `multi_tenant`: several organizations' jobs at once. Honoured only with `isolation:
  users`: jobs of one Unix user can read and rewrite each other's files and the runner
  bundle; otherwise the provider is single-tenant.
- `login`: an SSH login node, `{"host", "port", "user", "host_key"}` (the host key pinned as
  for an SSH provider; the private key is the provider's write-only credential
  `private_key`). Without it, the Slurm commands run on this host, which must then be a
  Slurm client of the cluster.

The reconcile pass polls every live attempt of a provider at once (`poll_many`): one
`slurmctl poll-many` on the login node, which asks one `squeue` about all their jobs (then
reads each one's exit record), so a pass costs one round trip per provider, not one per
attempt.

The bundle in `<work_dir>/.trainyard/` is never trusted for being there: slurmctl runs
through `bundle.verified_argv` (sha256 first; a file that differs is installed again and the
op tried once more), and the batch job runs it the same way. `release` deletes the attempt's
work directory. `poll`, `terminate` and `release` take everything from the handle the
control plane stored (the far side's handle.json only makes a second submit a no-op).

Billing starts when the job runs (`ALLOCATES_AT_LAUNCH = False`): until then `poll` answers
`queued` with Slurm's reason (Priority, Resources, ...). A preempted job (or one whose node
failed) polls `reclaimed`; jobs are submitted `--no-requeue`, so Slurm never reruns an
attempt behind the control plane's back. The job's time limit (`--time`) is the job's max
runtime plus TIME_LIMIT_MARGIN_MIN, so the control plane's own limit (with its grace period
and reason) comes first.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import posixpath
import threading
from collections.abc import Sequence
from typing import Any

from django.conf import settings

from apps.providers.backends.base import (
    Backend,
    Bootstrap,
    Handle,
    LaunchRequest,
    OfferInfo,
    PermanentBackendError,
    PollOutcome,
    PollResult,
    RetryableBackendError,
    relay_env,
)
from apps.providers.backends.bundle import (
    BUNDLE_MISMATCH,
    bundle_name,
    bundle_sha256,
    install_bundle,
    verified_argv,
)
from apps.providers.backends.ssh_transport import SshTransport
from apps.providers.backends.transport import LocalTransport, Transport
from runner import protocol

logger = logging.getLogger(__name__)

DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
ISOLATIONS = ("none", "users")
DEFAULT_HELPER = "/usr/local/sbin/trainyard-attempt-user"
BUNDLE_DIR = ".trainyard"
TIME_LIMIT_MARGIN_MIN = 5
CTL_TIMEOUT_S = 90.0
POLL_STATES = {"queued", "running", "exited", "lost", "reclaimed"}

# (transport, directory, bundle name) where the bundle is known to be installed: one
# `test -f` per process rather than one per command.
_installed: set[tuple[str, str, str]] = set()
_installed_lock = threading.Lock()


def login_transport(login: dict[str, Any], credentials: dict[str, str]) -> Transport:
    """The Transport to the SSH login node `login` ({"host", "port", "user", "host_key"},
    as an SSH provider's config has them), logging in with the provider's private key."""
    if not isinstance(login, dict):
        raise PermanentBackendError(
            'slurm: config `login` must be an object: {"host", "port", "user", "host_key"}'
        )
    return SshTransport(
        host=str(login.get("host") or ""),
        port=int(login.get("port") or 22),
        user=str(login.get("user") or ""),
        host_key=str(login.get("host_key") or ""),
        private_key=credentials.get("private_key", ""),
        state_dir=settings.SSH_STATE_DIR,
    )


def _poll_result(answer: dict[str, Any]) -> PollResult:
    """slurmctl's poll answer as a PollResult; PermanentBackendError when it is none."""
    state = answer.get("state")
    if state not in POLL_STATES:
        raise PermanentBackendError(f"slurm: slurmctl poll answered {answer!r}")
    return PollResult(state, exit_code=answer.get("exit_code"), detail=answer.get("detail", ""))


def _poll_outcome(result: object) -> PollOutcome:
    """One entry of slurmctl poll-many's `results`: a PollResult, or that job's error."""
    if not isinstance(result, dict):
        return PermanentBackendError(f"slurm: slurmctl poll-many answered {result!r}")
    if "error" in result:
        message = f"slurm: {result.get('error') or 'slurmctl poll failed'}"
        return (
            RetryableBackendError(message)
            if result.get("retryable")
            else (PermanentBackendError(message))
        )
    try:
        return _poll_result(result)
    except PermanentBackendError as exc:
        return exc


def job_name(job_id: str, attempt: int) -> str:
    """The Slurm job name of an attempt: `ty-<job id>-<attempt>`."""
    return f"ty-{job_id}-{attempt}"


class SlurmBackend(Backend):
    kind = "slurm"
    ALLOCATES_AT_LAUNCH = False
    # Slurm gives each job its node's GPUs itself (`--gres=gpu:<n>`, with CUDA_VISIBLE_DEVICES
    # set by its gres plugin): placement numbers none, and no LaunchRequest.gpu_devices come.
    ASSIGNS_GPU_DEVICES = False

    def __init__(
        self,
        config: dict[str, Any],
        credentials: dict[str, str] | None = None,
        transport: Transport | None = None,
    ) -> None:
        super().__init__(config, credentials)
        self._transport = transport

    @classmethod
    def single_tenant(cls, config: dict[str, Any]) -> bool:
        """True unless config `multi_tenant` on a cluster whose attempts run as users of
        their own (`isolation: users`)."""
        return not (config.get("multi_tenant", False) and config.get("isolation") == "users")

    # -- where and how commands run ------------------------------------------------------

    @property
    def transport(self) -> Transport:
        """Where slurmctl runs: this host, or the login node of config `login`."""
        if self._transport is None:
            login = self.config.get("login")
            self._transport = (
                login_transport(login, self.credentials) if login else LocalTransport()
            )
        return self._transport

    @property
    def work_dir(self) -> str:
        work_dir = self.config.get("work_dir")
        if not work_dir or not posixpath.isabs(work_dir):
            raise PermanentBackendError(
                "slurm: config `work_dir` must be an absolute path on a filesystem shared by "
                "the login and compute nodes"
            )
        return work_dir

    def _check_config(self) -> None:
        """Raise PermanentBackendError for a config that cannot work (`login`, `work_dir`)."""
        _ = self.transport, self.work_dir

    @property
    def python(self) -> str:
        return self.config.get("python") or "python3"

    @property
    def isolation(self) -> str:
        isolation = str(self.config.get("isolation") or "none")
        if isolation not in ISOLATIONS:
            raise PermanentBackendError(
                f"slurm: config `isolation` is `none` or `users`, not {isolation!r}"
            )
        return isolation

    def workdir(self, job_id: str, attempt: int) -> str:
        return posixpath.join(self.work_dir, job_id, f"attempt-{attempt}")

    def _bundle(self, *, again: bool = False) -> str:
        directory = posixpath.join(self.work_dir, BUNDLE_DIR)
        key = (self.transport.describe(), directory, bundle_name())
        with _installed_lock:
            if key in _installed and not again:
                return posixpath.join(directory, key[2])
        path = install_bundle(self.transport, directory)
        with _installed_lock:
            _installed.add(key)
        return path

    def _ctl(self, *args: str, input: dict[str, Any] | None = None) -> dict[str, Any]:
        """Run `slurmctl ARGS` on the login node; its JSON answer. Raises
        RetryableBackendError when Slurm did not answer, PermanentBackendError otherwise."""
        prefix = ["env", f"SLURM_CONF={self.config['slurm_conf']}"]
        data = json.dumps(input).encode() if input is not None else None
        for again in (False, True):
            argv = [*(prefix if self.config.get("slurm_conf") else [])]
            argv += verified_argv(self.python, self._bundle(again=again), "slurmctl", *args)
            result = self.transport.run(argv, input=data, timeout=CTL_TIMEOUT_S)
            if again or result.returncode != BUNDLE_MISMATCH:
                break
            logger.warning(
                "replacing the runner bundle on %s: %s",
                self.transport.describe(),
                result.stderr.decode(errors="replace").strip(),
            )
        try:
            answer = json.loads(result.stdout.decode(errors="replace").strip().splitlines()[-1])
        except (ValueError, IndexError):
            answer = None
        if not isinstance(answer, dict):
            error = result.stderr.decode(errors="replace").strip()[-500:]
            if result.returncode == BUNDLE_MISMATCH:
                raise RetryableBackendError(f"slurm: the runner bundle: {error}")
            raise PermanentBackendError(
                f"slurm: slurmctl {args[0]} failed on {self.transport.describe()} "
                f"(exit status {result.returncode}): {error}"
            )
        if result.returncode != 0 or "error" in answer:
            message = f"slurm: {answer.get('error') or 'slurmctl failed'}"
            if answer.get("retryable"):
                raise RetryableBackendError(message)
            raise PermanentBackendError(message)
        return answer

    # -- the attempt's life --------------------------------------------------------------

    def _runner_env(self, request: LaunchRequest, bootstrap: Bootstrap, workdir: str) -> dict:
        python = self.python
        path = self.config.get("path") or DEFAULT_PATH
        if posixpath.isabs(python):
            path = f"{posixpath.dirname(python)}:{path}"
        env = {
            **request.extra_env,
            "PATH": path,
            "PYTHONUNBUFFERED": "1",
            protocol.ENV_CONTROL_URL: bootstrap.control_url,
            protocol.ENV_JOB_ID: bootstrap.job_id,
            protocol.ENV_WORKDIR: workdir,
            **relay_env(self.config),
        }
        if self.config.get("pythonpath"):
            env["PYTHONPATH"] = self.config["pythonpath"]
        return env

    def attempt_user(self, job_id: str, attempt: int) -> str:
        """The attempt's own Unix user under `isolation: users` (as the SSH provider's)."""
        return "ty-" + hashlib.sha256(f"{job_id}/{attempt}".encode()).hexdigest()[:16]

    @classmethod
    def where_it_runs(cls, handle: Handle) -> str:
        job_id, user = handle.get("job_id"), handle.get("user")
        if not job_id:
            return ""
        return f"as Slurm job {job_id}, as user {user}" if user else f"as Slurm job {job_id}"

    def launch(self, request: LaunchRequest, bootstrap: Bootstrap) -> Handle:
        """Submit the attempt's batch job, or return the one it already has."""
        workdir = self.workdir(request.job_id, request.attempt)
        isolated = self.isolation == "users"
        runner_dir = posixpath.join(workdir, "run") if isolated else workdir
        time_minutes = None
        if request.max_runtime_hours:
            time_minutes = math.ceil(request.max_runtime_hours * 60) + TIME_LIMIT_MARGIN_MIN
        gpu = request.accelerator != "cpu" and request.gpu_count > 0
        spec = {
            "token": bootstrap.token,
            "env": self._runner_env(request, bootstrap, runner_dir),
            "python": self.python,
            "bundle": self._bundle(),
            "sha256": bundle_sha256(),
            "job_name": job_name(request.job_id, request.attempt),
            "partition": self.config.get("partition"),
            "account": self.config.get("account"),
            "time_minutes": time_minutes,
            "gres": f"gpu:{request.gpu_count}" if gpu else None,
            "cpus": self.config.get("cpus"),
        }
        if isolated:
            spec["user"] = self.attempt_user(request.job_id, request.attempt)
            spec["helper"] = str(self.config.get("attempt_user_helper") or DEFAULT_HELPER)
            spec["env"].update(HOME=runner_dir, USER=spec["user"], LOGNAME=spec["user"])
        answer = self._ctl("submit", workdir, input=spec)
        handle = {"job_id": str(answer["job_id"]), "name": answer["name"], "workdir": workdir}
        for key in ("user", "helper", "run"):
            if answer.get(key):
                handle[key] = str(answer[key])
        return handle

    @staticmethod
    def _owner(handle: Handle) -> list[str]:
        """slurmctl's trailing USER HELPER for an attempt user's job; none otherwise."""
        return [str(handle["user"]), str(handle["helper"])] if handle.get("user") else []

    def poll(self, handle: Handle) -> PollResult:
        where = handle.get("run") or handle["workdir"]
        answer = self._ctl("poll", where, str(handle["job_id"]), handle["name"])
        return _poll_result(answer)

    def poll_many(self, handles: Sequence[Handle]) -> list[PollOutcome]:
        """Every handle's poll in one `slurmctl poll-many` on the login node: one `squeue`
        for all the jobs (the handles go on stdin). Raises when Slurm or the login node did
        not answer (RetryableBackendError, for all of them); a malformed handle gets its
        own error."""
        outcomes: list[PollOutcome] = []
        asked: list[tuple[int, dict[str, str]]] = []
        for index, handle in enumerate(handles):
            try:
                item = {
                    "workdir": str(handle["workdir"]),
                    "job_id": str(handle["job_id"]),
                    "name": str(handle.get("name") or ""),
                }
                if handle.get("run"):
                    item["run"] = str(handle["run"])
            except (KeyError, TypeError, AttributeError):
                outcomes.append(PermanentBackendError(f"slurm: a malformed handle {handle!r}"))
                continue
            asked.append((index, item))
            outcomes.append(PermanentBackendError("slurm: slurmctl poll-many left it out"))
        if not asked:
            return outcomes
        answer = self._ctl("poll-many", input={"handles": [item for _, item in asked]})
        results = answer.get("results")
        if not isinstance(results, list) or len(results) != len(asked):
            raise PermanentBackendError(
                f"slurm: slurmctl poll-many answered {answer!r:.200} for {len(asked)} jobs"
            )
        for (index, _), result in zip(asked, results, strict=True):
            outcomes[index] = _poll_outcome(result)
        return outcomes

    def terminate(self, handle: Handle, grace_s: float) -> None:
        """SIGTERM to the job's processes now; SIGKILL and scancel after `grace_s`, by a
        detached helper on the login node. Returns at once."""
        grace = f"{max(0.0, grace_s):g}"
        self._ctl("cancel", str(handle["job_id"]), grace, handle["name"], *self._owner(handle))

    def release(self, handle: Handle) -> None:
        """The job is killed and cancelled (a no-op once it ended); its work directory is
        deleted (its diagnostics were read before), and an attempt user with it."""
        owner = self._owner(handle)
        self._ctl("release", str(handle["job_id"]), handle["workdir"], handle["name"], *owner)

    def diagnostics(self, handle: Handle) -> list[str]:
        try:
            return list(self._ctl("diagnostics", handle["workdir"]).get("lines") or [])
        except Exception:  # never raises: diagnostics explain a failure, they are not one
            return []

    # -- what the cluster offers ---------------------------------------------------------

    def _partition(self) -> dict[str, Any]:
        self._check_config()  # a config error says so, not "sinfo failed"
        try:
            partitions = self._ctl("sinfo")["partitions"]
        except (PermanentBackendError, RetryableBackendError) as exc:
            raise PermanentBackendError(f"sinfo failed: {exc}") from exc
        wanted = self.config.get("partition")
        for partition in partitions:
            if (partition["name"] == wanted) if wanted else partition["default"]:
                return partition
        names = ", ".join(p["name"] for p in partitions) or "none"
        what = f"partition {wanted!r}" if wanted else "a default partition"
        raise PermanentBackendError(f"slurm: the cluster has no {what} (partitions: {names})")

    def offers(self) -> list[OfferInfo]:
        accelerator = self.config.get("accelerator") or "cpu"
        slots = self.config.get("slots")
        if slots is None:
            slots = self._partition()["cpus_total"] if accelerator == "cpu" else 1
        gpu_counts = [int(count) for count in self.config.get("gpu_counts") or [1]]
        return [OfferInfo(accelerator=accelerator, gpu_counts=gpu_counts, capacity=int(slots))]

    def check(self) -> list[str]:
        """sinfo answers and the partition exists; the partition's node states and CPUs."""
        partition = self._partition()
        states = ", ".join(f"{count} {state}" for state, count in partition["states"].items())
        return [
            f"partition {partition['name']} ({partition['available']}): "
            f"{partition['nodes']} node(s): {states}",
            f"CPUs: {partition['cpus_idle']} idle of {partition['cpus_total']}",
        ]
