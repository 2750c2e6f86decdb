"""The SSH provider: runs each attempt as a detached runner on one far host, reached with the
system `ssh` client (`ssh_transport.SshTransport`).

Config keys (the Provider's `config`; never secrets):
- `host`, `port` (default 22), `user`: where to connect and as whom.
- `host_key`: the host's pinned known_hosts key (`ssh-ed25519 AAAA...`); a host that shows
  another key is refused, and no new key is ever accepted by itself.
- `work_dir`: the far host's directory for Trainyard (default `~/.trainyard/work`, resolved
  to an absolute path on the host): the runner bundle in `bin/`, and one work directory per
  attempt, `<work_dir>/<job id>/attempt-<n>`.
- `python`: the far host's interpreter for the runner and its tools (default `python3`).
- `pythonpath`: optional PYTHONPATH for workloads (a checkout holding `trainer/`, say).
- `slots`: the capacity offered when the host has no GPUs (default 1).
- `accelerator`: the accelerator name offered (default `cpu`).
- `runtime`: only `host` for now (the workload runs on the host itself; the job's image is
  not used).
- `isolation`: `none` (default: every attempt runs as the SSH user) or `users`: each attempt
  runs as a Unix user of its own (`ty-<16 hex>`), which the root helper
  `runner/attempt_user.py` creates at launch and deletes at release (the operator installs
  it as `attempt_user_helper`, default DEFAULT_HELPER, and a sudoers line for the SSH user;
  see docs/adding-a-provider.md). The workload then cannot write the runner bundle, the SSH
  user's files (`~/.ssh/authorized_keys`) or another attempt's directory.
- `multi_tenant`: several organizations' attempts on the host at once. Honoured only with
  `isolation: users`; otherwise the provider is single-tenant (one organization at a time).

Credentials (write-only, `Provider.set_credentials`): `private_key`, an OpenSSH private key
without a passphrase that the host's `user` accepts.

What runs there: `launch` installs the runner as one zipapp (`bundle.install_bundle`, sent
once per process, and again whenever the file there is not the one sent: every command runs
it through `bundle.verified_argv`, which checks its sha256 first) and runs its `hostctl
launch` (`runner.hostctl`): under a flock on the
attempt's work directory it starts one detached runner (new session, all descriptors
redirected, so the SSH channel closes at once) or, when one was launched, answers its
handle. The token goes over the SSH channel's stdin into a 0600 file the runner reads and
deletes; it is in no argv and no environment. `poll`, `terminate` and `release` are
`hostctl` ops on the attempt's handle as the control plane stored it (sent on stdin; the far
host's handle.json is never read back for them); `release` kills what is left and deletes
the attempt's work directory (and its user), so nothing a workload planted reaches the next
tenant. `diagnostics` reads the runner's log; `poll_many` (the reconcile
pass) is one `hostctl poll-many` for every attempt on the host, their work directories on
the command's stdin, so a pass costs one SSH round trip per host, not one per attempt.

A failed connection raises RetryableBackendError from every call, `poll` and `poll_many`
included: a host that cannot be reached is never by itself a `lost` attempt (the runner
heartbeats over HTTP, and the control plane decides on that).
"""

from __future__ import annotations

import hashlib
import json
import logging
import posixpath
import subprocess
import threading
from collections.abc import Sequence
from typing import Any

from django.conf import settings

from apps.providers.backends import ssh_forward
from apps.providers.backends.base import (
    Backend,
    BackendError,
    Bootstrap,
    Handle,
    LaunchRequest,
    OfferInfo,
    PermanentBackendError,
    PollOutcome,
    PollResult,
    RetryableBackendError,
    failed_poll,
    gpu_env,
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
from runner import protocol

logger = logging.getLogger(__name__)

DEFAULT_WORK_DIR = "~/.trainyard/work"
RUNTIMES = ("host",)
ISOLATIONS = ("none", "users")
DEFAULT_HELPER = "/usr/local/sbin/trainyard-attempt-user"
# The far host's own values of these reach the runner (its login's HOME, not ours).
INHERITED_ENV = ("HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TZ", "TMPDIR")
NO_PYTHON = 127  # the shell's status when the interpreter is not found
# One `hostctl poll-many` answers for every attempt on the host: a few ms per attempt there.
POLL_MANY_TIMEOUT_S = 60

# Per process: the far hosts' resolved work directories and installed bundles.
_resolved: dict[tuple[str, str], str] = {}
_installed: dict[tuple[str, str], str] = {}
_cache_lock = threading.Lock()


class SshBackend(Backend):
    kind = "ssh"
    SERVES_ENDPOINTS = True

    @classmethod
    def single_tenant(cls, config: dict[str, Any]) -> bool:
        """True unless the operator opted in with `multi_tenant` on a host whose attempts
        run as users of their own (`isolation: users`): attempts of one Unix user can read
        and rewrite each other's files and the runner that the next tenant runs."""
        return not (config.get("multi_tenant", False) and config.get("isolation") == "users")

    # -- plumbing ------------------------------------------------------------------------

    @property
    def transport(self) -> SshTransport:
        if not hasattr(self, "_transport"):
            runtime = self.config.get("runtime") or "host"
            if runtime not in RUNTIMES:
                raise PermanentBackendError(
                    f"The SSH provider runs runtime 'host' only, not {runtime!r}."
                )
            self._transport = SshTransport(
                host=str(self.config.get("host") or ""),
                port=int(self.config.get("port") or 22),
                user=str(self.config.get("user") or ""),
                host_key=str(self.config.get("host_key") or ""),
                private_key=self.credentials.get("private_key", ""),
                state_dir=settings.SSH_STATE_DIR,
            )
        return self._transport

    @property
    def python(self) -> str:
        return str(self.config.get("python") or "python3")

    @property
    def isolation(self) -> str:
        isolation = str(self.config.get("isolation") or "none")
        if isolation not in ISOLATIONS:
            raise PermanentBackendError(
                f"ssh: config `isolation` is `none` or `users`, not {isolation!r}"
            )
        return isolation

    def attempt_user(self, job_id: str, attempt: int) -> str:
        """The attempt's own Unix user under `isolation: users` (its name from the job's
        id and the attempt's number, so a launch tried again names the same one)."""
        return "ty-" + hashlib.sha256(f"{job_id}/{attempt}".encode()).hexdigest()[:16]

    def work_root(self) -> str:
        """The far host's work directory, absolute (`~` resolved there, once per process)."""
        configured = str(self.config.get("work_dir") or DEFAULT_WORK_DIR)
        if configured.startswith("/"):
            return posixpath.normpath(configured)
        key = (self.transport.digest, configured)
        if key not in _resolved:
            done = self.transport.run(["sh", "-c", 'printf %s "$HOME"'], timeout=30)
            home = done.stdout.decode(errors="replace").strip()
            if done.returncode != 0 or not home.startswith("/"):
                raise PermanentBackendError(
                    f"cannot find the home directory of {self.transport.describe()} to place "
                    f"work_dir {configured!r}: set config work_dir to an absolute path"
                )
            relative = configured[1:].lstrip("/") if configured.startswith("~") else configured
            with _cache_lock:
                _resolved[key] = posixpath.normpath(posixpath.join(home, relative))
        return _resolved[key]

    def bundle(self, *, again: bool = False) -> str:
        """The runner bundle's path on the far host, installed there once per process, or
        `again` (the one there failed its sha256 check)."""
        root = self.work_root()
        key = (self.transport.digest, root)
        path = _installed.get(key)
        if again or path is None or not path.endswith(bundle_name()):
            path = install_bundle(self.transport, posixpath.join(root, "bin"))
            with _cache_lock:
                _installed[key] = path
        return path

    def workdir(self, job_id: str, attempt: int) -> str:
        return posixpath.join(self.work_root(), job_id, f"attempt-{attempt}")

    def hostctl(
        self,
        op: str,
        *args: str,
        input: bytes | None = None,
        failure: type[BackendError] = RetryableBackendError,
        timeout: float = 60,
    ) -> dict[str, Any]:
        """Run `hostctl OP ARGS` on the far host and return its JSON answer. A status other
        than 0 raises `failure`. A bundle there that is missing or not ours (its sha256
        differs: a workload wrote over it) never runs; it is replaced and the op tried once
        more."""
        again = False
        for retry in (False, True):
            bundle = self.bundle(again=again)
            argv = verified_argv(self.python, bundle, "hostctl", op, *args)
            done = self.transport.run(argv, input=input, timeout=timeout)
            if done.returncode == 0:
                break
            if not retry and done.returncode == BUNDLE_MISMATCH:
                logger.warning(
                    "replacing the runner bundle on %s: %s",
                    self.transport.describe(),
                    done.stderr.decode(errors="replace").strip(),
                )
                again = True
                continue
            raise self._failed(op, done, failure)
        try:
            return json.loads(done.stdout)
        except ValueError as exc:
            raise failure(
                f"hostctl {op} on {self.transport.describe()} answered no JSON: "
                f"{done.stdout[:200]!r}"
            ) from exc

    def _failed(
        self, op: str, done: subprocess.CompletedProcess[bytes], failure: type[BackendError]
    ) -> BackendError:
        error = done.stderr.decode(errors="replace").strip() or f"exit status {done.returncode}"
        if done.returncode == NO_PYTHON:
            return PermanentBackendError(
                f"{self.transport.describe()} has no {self.python} ({error}): install Python 3 "
                "there or set the provider's config `python` to its interpreter"
            )
        return failure(f"hostctl {op} on {self.transport.describe()} failed: {error}")

    # -- the Backend interface -------------------------------------------------------------

    @classmethod
    def where_it_runs(cls, handle: Handle) -> str:
        host, user = handle.get("host"), handle.get("user")
        if not host:
            return ""
        return f"on {host}, as user {user}" if user else f"on {host}"

    def launch(self, request: LaunchRequest, bootstrap: Bootstrap) -> Handle:
        workdir = self.workdir(request.job_id, request.attempt)
        isolated = self.isolation == "users"
        # An attempt user's runner works in a directory of its own inside the attempt's.
        runner_dir = posixpath.join(workdir, "run") if isolated else workdir
        payload = {
            "token": bootstrap.token,
            "env": {**self._runner_env(runner_dir, bootstrap), **gpu_env(request.gpu_devices)},
            "inherit": list(INHERITED_ENV),
            "python": self.python,
            "bundle": self.bundle(),
            "sha256": bundle_sha256(),
            "markers": [
                f"{protocol.ENV_JOB_ID}={bootstrap.job_id}",
                f"{protocol.ENV_ATTEMPT}={bootstrap.attempt}",
            ],
        }
        if isolated:
            payload["user"] = self.attempt_user(request.job_id, request.attempt)
            payload["helper"] = str(self.config.get("attempt_user_helper") or DEFAULT_HELPER)
        handle = self.hostctl(
            "launch", workdir, input=json.dumps(payload).encode(), failure=PermanentBackendError
        )
        return {**handle, "host": self.transport.describe()}

    def _runner_env(self, workdir: str, bootstrap: Bootstrap) -> dict[str, str]:
        """The runner's environment, from scratch: nothing of the control plane's own."""
        path = ["/usr/local/bin", "/usr/bin", "/bin"]
        if self.python.startswith("/"):
            path.insert(0, posixpath.dirname(self.python))
        env = {
            "PATH": ":".join(path),
            "PYTHONUNBUFFERED": "1",
            protocol.ENV_CONTROL_URL: bootstrap.control_url,
            protocol.ENV_JOB_ID: bootstrap.job_id,
            protocol.ENV_WORKDIR: workdir,
            **relay_env(self.config),
        }
        if self.config.get("pythonpath"):
            env["PYTHONPATH"] = str(self.config["pythonpath"])
        return env

    def poll(self, handle: Handle) -> PollResult:
        """Raises RetryableBackendError when the host cannot be asked: never `lost` for that."""
        answer = self.hostctl("poll", input=json.dumps(handle).encode(), timeout=30)
        return PollResult(
            state=answer["state"],
            exit_code=answer.get("exit_code"),
            detail=answer.get("detail", ""),
        )

    def poll_many(self, handles: Sequence[Handle]) -> list[PollOutcome]:
        """Every handle's poll in one SSH command (`hostctl poll-many`, the handles on
        stdin). Raises RetryableBackendError, for all of them, when the host cannot be
        asked; a handle without a work directory gets its own error."""
        outcomes: list[PollOutcome] = []
        asked: list[tuple[int, Handle]] = []
        for index, handle in enumerate(handles):
            workdir = handle.get("workdir") if isinstance(handle, dict) else None
            if isinstance(workdir, str) and workdir:
                asked.append((index, handle))
            outcomes.append(PermanentBackendError(f"ssh: a handle without a workdir: {handle!r}"))
        if asked:
            request = json.dumps({"handles": [handle for _, handle in asked]}).encode()
            answer = self.hostctl("poll-many", input=request, timeout=POLL_MANY_TIMEOUT_S)
            results = answer.get("results") if isinstance(answer, dict) else None
            if not isinstance(results, list) or len(results) != len(asked):
                raise PermanentBackendError(
                    f"hostctl poll-many on {self.transport.describe()} answered "
                    f"{len(results) if isinstance(results, list) else 'no'} results for "
                    f"{len(asked)} handles"
                )
            for (index, _), result in zip(asked, results, strict=True):
                outcomes[index] = self._outcome(result)
        return outcomes

    def _outcome(self, result: object) -> PollOutcome:
        """One entry of `hostctl poll-many`'s answer as a PollResult, or its error."""
        if not isinstance(result, dict) or "error" in result:
            error = result.get("error") if isinstance(result, dict) else result
            return PermanentBackendError(
                f"hostctl poll on {self.transport.describe()} failed: {error}"
            )
        try:
            return PollResult(
                state=result["state"],
                exit_code=result.get("exit_code"),
                detail=result.get("detail", ""),
            )
        except (KeyError, TypeError) as exc:
            return failed_poll(exc)

    def terminate(self, handle: Handle, grace_s: float) -> None:
        """SIGTERM now, SIGKILL after `grace_s`, to what the control plane's handle names."""
        self.hostctl("terminate", str(grace_s), input=json.dumps(handle).encode(), timeout=30)

    def release(self, handle: Handle) -> None:
        """Kill what is left of the attempt and delete its work directory (and its user)."""
        self.hostctl("release", input=json.dumps(handle).encode(), timeout=60)
        ssh_forward.close(self.transport, handle["workdir"])

    def endpoint_url(self, handle: Handle, port: int) -> str:
        """A loopback port here forwarded over SSH to the far host's loopback `port`: the
        server is never exposed beyond the far host (`ssh_forward`)."""
        local = ssh_forward.forward(self.transport, "127.0.0.1", port, handle["workdir"])
        return f"http://127.0.0.1:{local}"

    def diagnostics(self, handle: Handle) -> list[str]:
        try:
            lines: Sequence[str] = self.hostctl("diagnostics", handle["workdir"])["lines"]
        except BackendError as exc:
            return [f"could not read the runner's log on {handle.get('host', 'the host')}: {exc}"]
        return [str(line) for line in lines]

    def offers(self) -> list[OfferInfo]:
        gpus = int(self.hostctl("capacity").get("gpus") or 0)
        accelerator = str(self.config.get("accelerator") or "cpu")
        if gpus > 0:
            return [OfferInfo(accelerator, list(range(1, gpus + 1)), capacity=gpus)]
        slots = int(self.config.get("slots") or 1)
        return [OfferInfo(accelerator, [1], capacity=slots)]

    def check(self) -> list[str]:
        """Connect, run the configured interpreter's `--version`; PermanentBackendError on
        a host key that does not match, a refused key or no Python there."""
        try:
            done = self.transport.run([self.python, "--version"], timeout=30)
        except RetryableBackendError as exc:
            raise PermanentBackendError(f"cannot reach {self.transport.describe()}: {exc}") from exc
        version = (done.stdout or done.stderr).decode(errors="replace").strip()
        if done.returncode != 0 or not version.startswith("Python 3"):
            raise PermanentBackendError(
                f"{self.transport.describe()} has no usable {self.python} "
                f"({version or f'exit status {done.returncode}'}): install Python 3 there or "
                "set the provider's config `python`"
            )
        lines = [f"connected to {self.transport.describe()}", f"{self.python}: {version}"]
        return lines + super().check()
