"""The local provider: runs each attempt on this host, in one of three runtimes.

- `podman` or `docker`: the attempt runs in the job's image, one container per attempt
  (`apps.providers.backends.containers`): its own processes, filesystem, environment and
  network (config `network`: `isolated`, the default — podman's slirp4netns, docker's
  bridge: the internet yes, the host's loopback no — or `none` for an offline host). The
  runner is mounted read-only and is the container's entrypoint; it reaches the control
  plane only through the attempt's control socket (`runner.control_socket`), a small
  process of this host started beside the container and stopped at release, which passes
  on that job's runner calls and nothing else. Port SERVICE_PORT of the container is
  published on the host's loopback, for a serving workload. Multi-tenant.
- `host`: the runner is a detached process group on this host, in a new session, so it
  outlives web and worker restarts; the job's image is not used. When the control plane runs
  as root, the runner and workload run as an unprivileged user (`run_as`, default nobody).
  Workloads on one host can still see each other's processes, so the provider is
  single-tenant: placement puts one organization's work on it at a time, unless an operator
  opts in with config `"multi_tenant": true` (or LOCAL_MULTI_TENANT for every local provider
  without that key). An ended attempt's work directory is locked
  away (root-owned, mode 0700) from the next one.

The runtime is the provider's config `"runtime"`, else the LOCAL_RUNTIME setting (`auto`:
podman, else docker, when one answers, else host). Each attempt gets a work directory
`<LOCAL_WORK_DIR>/<job id>/attempt-<n>`. Capacity is the Offer's slot count (placement
counts live attempts in the database).

- `launch` holds a file lock on the work directory and starts nothing if a runner for the
  attempt already ran or runs there (its `handle.json` names it): a redelivered task or a
  reconcile pass can never start the workload twice.
- `poll_many` (the reconcile pass) reads every container's state with one `container
  inspect`; a host runner's poll is a /proc read, done per handle.
- `terminate` starts a small detached reaper (SIGTERM to the group, SIGKILL after the grace
  period) and returns at once, so no Celery task waits out a grace period.
- `terminate`, `release` and the reaper signal a host runner's process group only while it
  is still the recorded one: its leader the runner the handle names (pid and start time), or,
  once the runner is gone, only the members that carry the attempt's
  TRAINYARD_JOB_ID/TRAINYARD_ATTEMPT (`procfs.group_targets`). A reused number is left alone.
- The runner's environment is built from scratch: the control plane's own variables
  (DATABASE_URL, SECRET_KEY, ...) never reach a workload, in any runtime.
- The runner token is in no environment: it is written to `runner.token` (mode 0600) in the
  work directory, and the runner is given only that file's path
  (TRAINYARD_RUNNER_TOKEN_FILE), which it reads and deletes before the workload starts.
"""

from __future__ import annotations

import compileall
import json
import logging
import os
import pwd
import shlex
import signal
import socket
import stat
import sys
import time
from collections.abc import Sequence
from contextlib import suppress
from functools import cache, partial
from pathlib import Path
from typing import Any

from django.conf import settings

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
    gpu_env,
    poll_outcome,
    relay_env,
)
from apps.providers.backends.containers import (
    WORKDIR_MOUNT,
    ContainerRuntime,
    ContainerState,
    RunSpec,
    container_name,
)
from runner import hostctl, procfs, protocol
from runner.control_socket import SOCKET_MOUNT, SOCKET_NAME, SOCKET_ORIGIN
from runner.hostctl import TOKEN_FILE
from runner.hostctl import locked as _locked
from runner.hostctl import read_handle as _read_handle
from runner.hostctl import recorded_exit as _recorded_exit
from runner.hostctl import write_json as _write_json
from runner.hostctl import write_token as _write_token

RUNTIMES = ("host", "podman", "docker")
logger = logging.getLogger(__name__)

PASSED_THROUGH_ENV = ("HOME", "LANG", "LC_ALL", "TMPDIR", "TZ", "USER")
# A container attempt's control socket lives in `<workdir><CONTROL_DIR_SUFFIX>/`, beside its
# work directory (the container mounts it read-only at SOCKET_MOUNT).
CONTROL_DIR_SUFFIX = ".control"
PLANNED_HANDLE = "handle.json"  # the container's handle, written before it starts
CONTROL_SOCKET_WAIT_S = 10.0
# The port of a container's own network that is published to the host's loopback: where a
# serving workload listens ($TRAINYARD_SERVICE_PORT), the proxy's one way in.
SERVICE_PORT = 8000
# Each organization's Hugging Face cache, under the provider's work directory, and where a
# container mounts it.
HUB_CACHE_DIR = ".hub-cache"
HUB_CACHE_MOUNT = "/var/cache/trainyard-hub"


@cache
def _detected_runtime() -> str:
    for binary in ("podman", "docker"):
        if container_runtime(binary).works():
            return binary
    return "host"


def container_runtime(binary: str, config: dict[str, Any] | None = None) -> ContainerRuntime:
    """The runtime `binary` with the flags this host needs: the provider's config
    `global_args`/`run_args` (a string, split as a shell would) when it names them, else the
    CONTAINER_GLOBAL_ARGS/CONTAINER_RUN_ARGS settings."""
    config = config or {}
    global_args = config.get("global_args", settings.CONTAINER_GLOBAL_ARGS)
    run_args = config.get("run_args", settings.CONTAINER_RUN_ARGS)
    return ContainerRuntime(
        binary,
        global_args=tuple(shlex.split(str(global_args or ""))),
        run_args=tuple(shlex.split(str(run_args or ""))),
    )


def runtime_of(config: dict[str, Any]) -> str:
    """The runtime a local provider with this config uses."""
    runtime = config.get("runtime") or settings.LOCAL_RUNTIME
    if runtime == "auto":
        return _detected_runtime()
    if runtime not in RUNTIMES:
        raise PermanentBackendError(f"Unknown runtime {runtime!r}: one of {', '.join(RUNTIMES)}")
    return runtime


def refuse_own_uid(config: dict[str, Any]) -> None:
    """A host runner that would run as the control plane's own user (not root, or no
    `run_as` it can use) could read the control plane's environment (database URL,
    SECRET_KEY, SECRETS_KEYS), every tenant's media and the SSH providers' keys: allowed
    only on a host the operator marks development-only (config `dev_only`, else the
    LOCAL_HOST_RUNTIME_DEV_ONLY setting). Otherwise the launch fails `launch_failed`."""
    if config.get("dev_only", settings.LOCAL_HOST_RUNTIME_DEV_ONLY):
        return
    raise PermanentBackendError(
        f"the host runtime would run this workload as the control plane's own user (uid "
        f"{os.geteuid()}), which can read its secrets and every tenant's files: run jobs in "
        "containers (LOCAL_RUNTIME=podman or docker), run the worker as root with a run_as "
        "user, or mark this host development-only with LOCAL_HOST_RUNTIME_DEV_ONLY=1 "
        '(a provider\'s config "dev_only": true)'
    )


class LocalBackend(Backend):
    kind = "local"
    SERVES_ENDPOINTS = True

    @classmethod
    def single_tenant(cls, config: dict[str, Any]) -> bool:
        """True when one organization's workloads could see another's here."""
        shared = config.get("multi_tenant", settings.LOCAL_MULTI_TENANT)
        return runtime_of(config) == "host" and not shared

    @property
    def runtime(self) -> str:
        return runtime_of(self.config)

    @classmethod
    def where_it_runs(cls, handle: Handle) -> str:
        if "container" in handle:
            return (
                f"in a {handle.get('runtime') or 'container'} container of image "
                f"{handle.get('image')}, on a network of its own"
            )
        user = handle.get("user")
        where = "as a process of the control plane's host (no container: its image is unused)"
        return f"{where}, as user {user}" if user else where

    def endpoint_url(self, handle: Handle, port: int) -> str:
        """This host's loopback: a host runner shares it; a container's port is the one
        published for it there (its SERVICE_PORT), and no other of its ports is reachable."""
        ports = handle.get("ports") if isinstance(handle, dict) else None
        if "container" not in handle:
            return f"http://127.0.0.1:{int(port)}"
        published = (ports or {}).get(str(int(port)))
        if published is None:
            raise PermanentBackendError(
                f"port {port} of the container is not published: serve on "
                f"${protocol.ENV_SERVICE_PORT} ({SERVICE_PORT})"
            )
        return f"http://127.0.0.1:{int(published)}"

    @property
    def containers(self) -> ContainerRuntime:
        return container_runtime(self.runtime, self.config)

    @property
    def work_root(self) -> Path:
        return Path(self.config.get("work_dir") or settings.LOCAL_WORK_DIR)

    def workdir(self, job_id: str, attempt: int) -> Path:
        return self.work_root / job_id / f"attempt-{attempt}"

    def hub_cache(self, request: LaunchRequest) -> Path | None:
        """The organization's Hugging Face cache on this provider (created 0700), which
        every attempt of its jobs here reuses; None when the request names no organization.
        Only that organization's workloads get it: a container mounts its own
        organization's directory and nothing else of the host."""
        if not request.organization_key:
            return None
        path = self.work_root / HUB_CACHE_DIR / request.organization_key
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        return path

    def launch(self, request: LaunchRequest, bootstrap: Bootstrap) -> Handle:
        workdir = self.workdir(request.job_id, request.attempt)
        workdir.mkdir(parents=True, exist_ok=True)
        with _locked(workdir / "launch.lock"):
            existing = _read_handle(workdir)
            if existing is not None:
                return existing
            if self.runtime == "host":
                handle = self._start_runner(
                    workdir, bootstrap, request.gpu_devices, self.hub_cache(request)
                )
            else:
                handle = self._start_container(workdir, request, bootstrap)
            _write_json(workdir / "handle.json", handle)
            return handle

    def _start_container(
        self, workdir: Path, request: LaunchRequest, bootstrap: Bootstrap
    ) -> Handle:
        """One container per attempt, on a network of its own, its runner's one way out the
        attempt's control socket. A running container that a crashed launch left behind is
        adopted, never doubled (its name is the attempt's); one created but never started
        is removed and started anew."""
        containers = self.containers
        name = container_name(request.job_id, request.attempt)
        control_dir = workdir.parent / f"{workdir.name}{CONTROL_DIR_SUFFIX}"
        # The planned handle is written before the container is run: without it no earlier
        # launch got that far, and there is no container to look for.
        planned = _read_json(control_dir / PLANNED_HANDLE)
        if planned is not None:
            state = containers.state(name)
            if state.never_started:
                containers.remove(name)
            elif state.status != "missing":
                return planned
        network = str(self.config.get("network") or "isolated")
        containers.network_args(network)  # an unknown network fails before anything starts
        containers.ensure_image(request.image, pull_timeout_s=settings.IMAGE_PULL_TIMEOUT_S)
        # The control socket starts while the container does (its runner retries a socket
        # that is not there yet); the launch waits for both.
        control = self._spawn_control_socket(control_dir, bootstrap)
        host_port = free_loopback_port()
        hub_cache = self.hub_cache(request)
        handle = {
            "runtime": self.runtime,
            "container": name,
            "image": request.image,
            "workdir": str(workdir),
            "control": control,
            "ports": {str(SERVICE_PORT): host_port},
        }
        _write_json(control_dir / PLANNED_HANDLE, handle)
        token_file = _write_token(workdir, bootstrap.token)
        spec = RunSpec(
            name=name,
            image=request.image,
            workdir=str(workdir),
            runner_dir=str(_compiled_runner_dir()),
            env={
                "PYTHONPATH": "/opt/trainyard",
                "PYTHONUNBUFFERED": "1",
                protocol.ENV_CONTROL_URL: SOCKET_ORIGIN,
                protocol.ENV_CONTROL_SOCKET: f"{SOCKET_MOUNT}/{SOCKET_NAME}",
                protocol.ENV_JOB_ID: bootstrap.job_id,
                protocol.ENV_RUNNER_TOKEN_FILE: f"{WORKDIR_MOUNT}/{TOKEN_FILE}",
                protocol.ENV_WORKDIR: WORKDIR_MOUNT,
                protocol.ENV_SERVICE_PORT: str(SERVICE_PORT),
                **({protocol.ENV_HUB_CACHE: HUB_CACHE_MOUNT} if hub_cache else {}),
            },
            gpu_devices=request.gpu_devices if request.accelerator != "cpu" else (),
            labels={"trainyard.job": request.job_id, "trainyard.attempt": str(request.attempt)},
            network=network,
            read_only={str(control_dir): SOCKET_MOUNT},
            read_write={str(hub_cache): HUB_CACHE_MOUNT} if hub_cache else {},
            published=((host_port, SERVICE_PORT),) if network != "none" else (),
        )
        started = False
        try:
            containers.run(spec, host_env=_cli_env())
            started = True
            _await_control_socket(control_dir, control)
        except Exception:
            token_file.unlink(missing_ok=True)  # no runner will read it
            _stop_control_socket(handle)
            if started:
                containers.remove(name)
            raise
        return handle

    def _spawn_control_socket(self, control_dir: Path, bootstrap: Bootstrap) -> Handle:
        """Start the attempt's control socket (`runner.control_socket`) in `control_dir`,
        which the container mounts read-only: a detached process of its own that forwards
        only this job's runner calls to the control plane (or the provider's relay), as
        nobody when we are root and nobody can run our interpreter. Returns at once;
        `_await_control_socket` waits until it serves."""
        control_dir.mkdir(parents=True, exist_ok=True)
        python = sys.executable
        argv = [python, "-m", "runner.control_socket", "--socket", SOCKET_NAME]
        argv += ["--job", bootstrap.job_id, "--upstream", bootstrap.control_url]
        relay = str(self.config.get("relay_url") or "").strip()
        if relay:
            argv += ["--relay", relay]
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(settings.BASE_DIR)}
        user = self._run_as(python, control_dir)
        run_as = None
        if user is not None:
            os.chown(control_dir, user.pw_uid, user.pw_gid)
            run_as = (user.pw_uid, user.pw_gid)
        (control_dir / SOCKET_NAME).unlink(missing_ok=True)
        try:
            control = hostctl.spawn_runner(argv, control_dir, env, [], run_as)
        except OSError as exc:
            raise PermanentBackendError(f"could not start the control socket: {exc}") from exc
        return control

    def _start_runner(
        self,
        workdir: Path,
        bootstrap: Bootstrap,
        gpu_devices: tuple[int, ...] = (),
        hub_cache: Path | None = None,
    ) -> Handle:
        """A detached runner on this host; CUDA sees only the attempt's `gpu_devices`
        (base.gpu_env: none for a CPU attempt); its workload's hub cache is `hub_cache`."""
        python = self.config.get("python") or sys.executable
        env = {name: os.environ[name] for name in PASSED_THROUGH_ENV if name in os.environ}
        env.update(
            {
                # The project's interpreter first, so `python` in a workload is ours.
                "PATH": os.pathsep.join(
                    [str(Path(python).parent), "/usr/local/bin", "/usr/bin", "/bin"]
                ),
                "PYTHONPATH": str(settings.BASE_DIR),
                "PYTHONUNBUFFERED": "1",
                protocol.ENV_CONTROL_URL: bootstrap.control_url,
                protocol.ENV_JOB_ID: bootstrap.job_id,
                protocol.ENV_WORKDIR: str(workdir),
                **relay_env(self.config),
                **gpu_env(gpu_devices),
            }
        )
        user = self._run_as(python, workdir)
        if user is None:
            refuse_own_uid(self.config)
        token_file = _write_token(workdir, bootstrap.token)
        env[protocol.ENV_RUNNER_TOKEN_FILE] = str(token_file)
        run_as = None
        if user is not None:
            _chown_tree(workdir, user.pw_uid, user.pw_gid)
            env.update({"HOME": str(workdir), "USER": user.pw_name})
            run_as = (user.pw_uid, user.pw_gid)
        if hub_cache is not None:
            if user is not None:
                os.chown(hub_cache, user.pw_uid, user.pw_gid)
            env[protocol.ENV_HUB_CACHE] = str(hub_cache)
        markers = [
            f"{protocol.ENV_JOB_ID}={bootstrap.job_id}",
            f"{protocol.ENV_ATTEMPT}={bootstrap.attempt}",
        ]
        try:
            handle = hostctl.spawn_runner([python, "-m", "runner"], workdir, env, markers, run_as)
        except OSError as exc:
            token_file.unlink(missing_ok=True)  # no runner will read it
            raise PermanentBackendError(f"could not start the runner: {exc}") from exc
        name = user.pw_name if user is not None else pwd.getpwuid(os.geteuid()).pw_name
        return {**handle, "runtime": "host", "user": name}

    def _run_as(self, python: str, workdir: Path) -> pwd.struct_passwd | None:
        """The unprivileged user a host-runtime runner (or a control socket) runs as when we
        are root: `run_as` (default nobody), provided it can run `python` at all, import the
        project's packages and reach `workdir` (which it is then given). Where it cannot (an
        interpreter, a checkout or a var directory under /root, say), the process stays root
        and a warning says why: never a runner that fails on its first file."""
        name = self.config.get("run_as", "nobody")
        if os.geteuid() != 0 or not name:
            return None
        try:
            user = pwd.getpwnam(name)
        except KeyError as exc:
            raise PermanentBackendError(f"run_as user {name!r} does not exist") from exc
        if not _world_executable(Path(python)):
            logger.warning(
                "local provider: %s cannot run %s, so runners run as root; set the "
                "provider's config python to an interpreter every user can run",
                name,
                python,
            )
            return None
        unreachable = [
            path
            for path, readable in ((Path(settings.BASE_DIR), True), (workdir.parent, False))
            if not _reachable_by_others(path, readable=readable)
        ]
        if unreachable:
            logger.warning(
                "local provider: %s cannot reach %s, so runners run as root; put the "
                "checkout and TRAINYARD_VAR_DIR where every user may pass (not under /root)",
                name,
                unreachable[0],
            )
            return None
        return user

    def poll(self, handle: Handle) -> PollResult:
        if "container" in handle:
            return self._poll_container(handle)
        return PollResult(**hostctl.state_of(handle))

    def poll_many(self, handles: Sequence[Handle]) -> list[PollOutcome]:
        """A host runner's poll is a read of /proc and its work directory: each is polled
        as by `poll`. The containers' states come from one `container inspect` for all of
        them, not one CLI call per container; when the runtime does not answer, each
        container's handle gets that error (the host runners are still polled)."""
        names = [
            handle["container"]
            for handle in handles
            if isinstance(handle, dict) and isinstance(handle.get("container"), str)
        ]
        states: dict[str, ContainerState] = {}
        failed: BackendError | None = None
        try:
            states = self.containers.states(names) if names else {}
        except BackendError as exc:  # the runtime did not answer: each container's error
            failed = exc
        outcomes: list[PollOutcome] = []
        for handle in handles:
            name = handle.get("container") if isinstance(handle, dict) else None
            state = states.get(name) if isinstance(name, str) else None
            if isinstance(name, str) and failed is not None:
                outcomes.append(failed)
            elif state is None:  # a host runner (or a handle that is no container's)
                outcomes.append(poll_outcome(self.poll, handle))
            else:
                read = partial(self._container_result, state=state)
                outcomes.append(poll_outcome(read, handle))
        return outcomes

    def _poll_container(self, handle: Handle) -> PollResult:
        return self._container_result(handle, self.containers.state(handle["container"]))

    def _container_result(self, handle: Handle, state: ContainerState) -> PollResult:
        if state.running:
            return PollResult("running")
        if state.never_started:
            return PollResult("lost", detail="the attempt's container was created but never ran")
        if state.status == "missing":
            return PollResult("lost", detail="the attempt's container is gone")
        workdir = Path(handle["workdir"])
        exit_code = _recorded_exit(workdir)
        if exit_code is not None:
            return PollResult("exited", exit_code=exit_code)
        if (workdir / "runner.pid").exists():
            return PollResult("lost", detail="the runner's container ended with no exit record")
        # The runner never ran (an image without python3, say): the container's own code.
        code = state.exit_code if state.exit_code is not None else -1
        return PollResult("exited", exit_code=code)

    def terminate(self, handle: Handle, grace_s: float) -> None:
        if "container" in handle:
            self.containers.stop_detached(handle["container"], grace_s)
            return
        hostctl.start_reaper(sys.executable, handle, grace_s)

    def release(self, handle: Handle) -> None:
        """Nothing outlives an attempt: its container is removed, or whatever is left of its
        process group is SIGKILLed. The work directory stays for inspection (the logs are
        already in the database), locked away from later attempts' users."""
        if "container" in handle:
            self.containers.remove(handle["container"])
            _stop_control_socket(handle)
        else:
            hostctl.kill_leftovers(handle)
        workdir = Path(handle["workdir"])
        # A runner that never ran left its token behind.
        (workdir / TOKEN_FILE).unlink(missing_ok=True)
        if os.geteuid() == 0 and workdir.is_dir():
            os.chown(workdir, 0, 0)
            workdir.chmod(0o700)

    def offers(self) -> list[OfferInfo]:
        return [OfferInfo(accelerator="cpu", gpu_counts=[1], capacity=os.cpu_count() or 1)]


@cache
def _compiled_runner_dir() -> Path:
    """The runner package, its bytecode compiled (once per process): a container mounts it
    read-only, so its Python cannot cache what it compiles and would compile every module
    at each start. Where the package is not writable it is used as it is."""
    runner_dir = Path(protocol.__file__).resolve().parent
    with suppress(OSError):
        compileall.compile_dir(runner_dir, maxlevels=0, quiet=2)
    return runner_dir


def _await_control_socket(control_dir: Path, control: Handle) -> None:
    """Wait until the control socket serves in `control_dir`; PermanentBackendError (with
    the last lines of its log) when its process died or it took over CONTROL_SOCKET_WAIT_S."""
    deadline = time.monotonic() + CONTROL_SOCKET_WAIT_S
    while not (control_dir / SOCKET_NAME).exists():
        if time.monotonic() > deadline or not procfs.alive(control["pid"]):
            tail = " / ".join(hostctl.log_tail(control_dir, 3))
            raise PermanentBackendError(f"the control socket did not start: {tail}")
        time.sleep(0.005)


def _stop_control_socket(handle: Handle) -> None:
    """SIGKILL the attempt's control socket server (only while it is the recorded process)."""
    control = handle.get("control")
    if isinstance(control, dict) and {"pid", "pgid"} <= set(control):
        procfs.signal_group(*hostctl.group_of(control), signal.SIGKILL)


def _read_json(path: Path) -> Handle | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def free_loopback_port() -> int:
    """A port of the host's loopback that nothing listens on now (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _cli_env() -> dict[str, str]:
    """The container CLI's own environment: enough to run it, nothing of the control
    plane's secrets (the container gets only the names `run` passes)."""
    return {
        name: os.environ[name] for name in ("PATH", "HOME", "XDG_RUNTIME_DIR") if name in os.environ
    }


def _world_executable(path: Path) -> bool:
    """Whether any user may run `path`: every directory on the way is searchable by others
    (to the path as given, a venv's link, and to the file it resolves to) and the file
    executable by others (what an unprivileged user needs, without it being asked of the
    kernel as that user)."""
    target = path.resolve()
    try:
        if not target.stat().st_mode & stat.S_IXOTH:
            return False
        return _reachable_by_others(path.absolute().parent) and _reachable_by_others(target.parent)
    except OSError:
        return False


def _reachable_by_others(folder: Path, *, readable: bool = False) -> bool:
    """Whether any user may pass through `folder` and every directory above it (and list
    and read it, when `readable`)."""
    folder = folder.absolute()
    need = stat.S_IXOTH | (stat.S_IROTH if readable else 0)
    try:
        if folder.stat().st_mode & need != need:
            return False
        return all(parent.stat().st_mode & stat.S_IXOTH for parent in folder.parents)
    except OSError:
        return False


def _chown_tree(root: Path, uid: int, gid: int) -> None:
    for path in (root, *root.rglob("*")):
        with suppress(FileNotFoundError):
            os.chown(path, uid, gid, follow_symlinks=False)
