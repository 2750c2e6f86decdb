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
- `multi_tenant`: every job runs as the same Unix user, so workloads of different
  organizations could see each other: the provider is single-tenant unless this is true.
- `login`: an SSH login node, `{"host", "port", "user", "host_key"}` (the host key pinned as
  for an SSH provider; the private key is the provider's write-only credential
  `private_key`). Without it, the Slurm commands run on this host, which must then be a
  Slurm client of the cluster.

The reconcile pass polls every live attempt of a provider at once (`poll_many`): one
`slurmctl poll-many` on the login node, which asks one `squeue` about all their jobs (then
reads each one's exit record), so a pass costs one round trip per provider, not one per
attempt.

Billing starts when the job runs (`ALLOCATES_AT_LAUNCH = False`): until then `poll` answers
`queued` with Slurm's reason (Priority, Resources, ...). A preempted job (or one whose node
failed) polls `reclaimed`; jobs are submitted `--no-requeue`, so Slurm never reruns an
attempt behind the control plane's back. The job's time limit (`--time`) is the job's max
runtime plus TIME_LIMIT_MARGIN_MIN, so the control plane's own limit (with its grace period
and reason) comes first.
"""

from __future__ import annotations

import json
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
from apps.providers.backends.bundle import bundle_name, install_bundle
from apps.providers.backends.ssh_transport import SshTransport
from apps.providers.backends.transport import LocalTransport, Transport
from runner import protocol

DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
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
        """Every job runs as the same Unix user: True unless config `multi_tenant`."""
        return not config.get("multi_tenant", False)

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

    def workdir(self, job_id: str, attempt: int) -> str:
        return posixpath.join(self.work_dir, job_id, f"attempt-{attempt}")

    def _bundle(self) -> str:
        directory = posixpath.join(self.work_dir, BUNDLE_DIR)
        key = (self.transport.describe(), directory, bundle_name())
        with _installed_lock:
            if key in _installed:
                return posixpath.join(directory, key[2])
        path = install_bundle(self.transport, directory)
        with _installed_lock:
            _installed.add(key)
        return path

    def _ctl(self, *args: str, input: dict[str, Any] | None = None) -> dict[str, Any]:
        """Run `slurmctl ARGS` on the login node; its JSON answer. Raises
        RetryableBackendError when Slurm did not answer, PermanentBackendError otherwise."""
        prefix = ["env", f"SLURM_CONF={self.config['slurm_conf']}"]
        argv = [*(prefix if self.config.get("slurm_conf") else []), self.python]
        argv += [self._bundle(), "slurmctl", *args]
        data = json.dumps(input).encode() if input is not None else None
        result = self.transport.run(argv, input=data, timeout=CTL_TIMEOUT_S)
        try:
            answer = json.loads(result.stdout.decode(errors="replace").strip().splitlines()[-1])
        except (ValueError, IndexError):
            answer = None
        if not isinstance(answer, dict):
            error = result.stderr.decode(errors="replace").strip()[-500:]
            if "can't open file" in error:
                _installed.clear()  # the bundle went away: install it again next time
                raise RetryableBackendError(f"slurm: the runner bundle is missing: {error}")
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

    def launch(self, request: LaunchRequest, bootstrap: Bootstrap) -> Handle:
        """Submit the attempt's batch job, or return the one it already has."""
        workdir = self.workdir(request.job_id, request.attempt)
        time_minutes = None
        if request.max_runtime_hours:
            time_minutes = math.ceil(request.max_runtime_hours * 60) + TIME_LIMIT_MARGIN_MIN
        gpu = request.accelerator != "cpu" and request.gpu_count > 0
        spec = {
            "token": bootstrap.token,
            "env": self._runner_env(request, bootstrap, workdir),
            "python": self.python,
            "bundle": self._bundle(),
            "job_name": job_name(request.job_id, request.attempt),
            "partition": self.config.get("partition"),
            "account": self.config.get("account"),
            "time_minutes": time_minutes,
            "gres": f"gpu:{request.gpu_count}" if gpu else None,
            "cpus": self.config.get("cpus"),
        }
        answer = self._ctl("submit", workdir, input=spec)
        return {"job_id": str(answer["job_id"]), "name": answer["name"], "workdir": workdir}

    def poll(self, handle: Handle) -> PollResult:
        answer = self._ctl("poll", handle["workdir"], str(handle["job_id"]), handle["name"])
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
        self._ctl("cancel", str(handle["job_id"]), f"{max(0.0, grace_s):g}", handle["name"])

    def release(self, handle: Handle) -> None:
        """The job is killed and cancelled (a no-op once it ended); its work directory
        stays for inspection."""
        self._ctl("release", str(handle["job_id"]), handle["workdir"], handle["name"])

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
