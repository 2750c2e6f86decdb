"""A real single-node Slurm cluster for the tests: munged, slurmctld and slurmd, each in the
foreground as a child of the test process, with a config of their own (`SLURM_CONF`) in a
fresh directory, on free ports, so nothing of the host's (/etc/slurm, /run/munge) is used or
changed.

The node has two CPUs and two partitions on it: `low` (the default, preemptible: a job there
is requeued, or with `--no-requeue` ended PREEMPTED, when a `high` job needs its CPUs) and
`high`. An ended job stays in `squeue` for `MIN_JOB_AGE_S` (a minute; Slurm's default is five):
long enough that a reconcile pass on a busy host still sees a PREEMPTED job as preempted.

Needs root (slurmd runs jobs as their user) and Debian's slurmctld, slurmd and munge (the
munge key is the cluster's own, made here).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from runner import procfs
from tests.live import free_port
from tests.live import read_or_empty as _read

MIN_JOB_AGE_S = 60
DAEMONS = ("/usr/sbin/munged", "/usr/sbin/slurmctld", "/usr/sbin/slurmd")


def squeue_state(conf: str, job_id: str) -> str | None:
    """squeue's state of a job (PENDING, RUNNING, ...) on the cluster of `conf`; None once
    it left squeue."""
    result = subprocess.run(
        ["squeue", "-h", "--states", "all", "-j", job_id, "-o", "%T"],
        env={**os.environ, "SLURM_CONF": conf},
        capture_output=True,
        text=True,
    )
    return result.stdout.strip() or None


def _stepds(prefix: bytes = b"slurmstepd: [") -> list[int]:
    """The live slurmstepd processes here whose title starts with `prefix`."""
    return [
        int(entry)
        for entry in os.listdir("/proc")
        if entry.isdigit()
        and _read(f"/proc/{entry}/cmdline").startswith(prefix)
        and procfs.alive(int(entry))
    ]


def _stepd_running(job_id: str) -> bool:
    """Whether a slurmstepd of `job_id` runs here (its title: `slurmstepd: [ID.batch]`)."""
    return bool(_stepds(f"slurmstepd: [{job_id}.".encode()))


def _descendants(roots: list[int]) -> list[int]:
    """`roots` and every process below them."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        fields = _read(f"/proc/{entry}/stat").rsplit(b")", 1)[-1].split() if entry.isdigit() else []
        if len(fields) > 1:  # after the name: state, ppid, ...
            children.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = [], list(roots)
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


# What squeue says of a job that holds (or waits for) the node: not over yet.
LIVE_STATES = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "STOPPED"}


def available() -> str | None:
    """None when a cluster can be started here, else why not."""
    missing = [path for path in DAEMONS if not os.access(path, os.X_OK)]
    if missing:
        return f"not installed: {', '.join(missing)}"
    if os.geteuid() != 0:
        return "slurmd needs root"
    try:
        pwd.getpwnam("munge")
    except KeyError:
        return "no munge user"
    return None


class SlurmCluster:
    """The daemons and their files under `root`. `env` is what a Slurm client needs
    (SLURM_CONF); `conf` the config file's path."""

    def __init__(self) -> None:
        # Not under pytest's private tmp dirs: the munge user must reach its socket.
        self.root = Path(tempfile.mkdtemp(prefix="trainyard-slurm-"))
        self.root.chmod(0o755)
        self.host = socket.gethostname().split(".")[0]
        self.conf = self.root / "slurm.conf"
        self.munge_socket = self.root / "munge" / "munge.socket"
        self.processes: dict[str, subprocess.Popen] = {}

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    def _client_env(self) -> dict[str, str]:
        return {**os.environ, **self.env}

    # -- setup ---------------------------------------------------------------------------

    def _write_conf(self) -> None:
        for name in ("ctld", "d", "log"):
            (self.root / name).mkdir(exist_ok=True)
        lines = {
            "ClusterName": "trainyard",
            "SlurmctldHost": self.host,
            "SlurmUser": "root",
            "SlurmdUser": "root",
            "AuthType": "auth/munge",
            "AuthInfo": f"socket={self.munge_socket}",
            "CredType": "cred/munge",
            "StateSaveLocation": self.root / "ctld",
            "SlurmdSpoolDir": self.root / "d",
            "SlurmctldPidFile": self.root / "slurmctld.pid",
            "SlurmdPidFile": self.root / "slurmd.pid",
            "SlurmctldLogFile": self.root / "log" / "slurmctld.log",
            "SlurmdLogFile": self.root / "log" / "slurmd.log",
            "SlurmctldPort": free_port(),
            "SlurmdPort": free_port(),
            "MpiDefault": "none",
            "ReturnToService": 2,
            "ProctrackType": "proctrack/linuxproc",
            "TaskPlugin": "task/none",
            "SelectType": "select/cons_tres",
            "SelectTypeParameters": "CR_Core",
            "JobAcctGatherType": "jobacct_gather/none",
            "AccountingStorageType": "accounting_storage/none",
            "KillWait": 5,
            # A client retries a controller that does not answer for MessageTimeout - 1 s
            # (default 10: the tests that stop the controller waited 9 s per command).
            "MessageTimeout": 5,
            "MinJobAge": MIN_JOB_AGE_S,
            # The main loop (which preempts) every 2 s, not every 60 s.
            "SchedulerParameters": (
                "batch_sched_delay=0,sched_min_interval=100000,sched_interval=2,bf_interval=1"
            ),
            "PreemptType": "preempt/partition_prio",
            "PreemptMode": "REQUEUE",
        }
        text = "".join(f"{key}={value}\n" for key, value in lines.items())
        # A preempted job gets GraceTime to stop before SIGKILL: a trainer finishing its
        # checkpoint and the runner uploading it took longer than 4 s on a loaded 2-core
        # machine, and the next attempt restarted from the beginning. A job that stops at
        # once (every other test's) never waits for it.
        text += (
            f"NodeName={self.host} CPUs=2 RealMemory=20000\n"
            f"PartitionName=low Nodes={self.host} Default=YES PriorityTier=1 "
            "PreemptMode=REQUEUE GraceTime=15\n"
            f"PartitionName=high Nodes={self.host} PriorityTier=10 PreemptMode=OFF\n"
        )
        self.conf.write_text(text)

    def _start_munge(self) -> None:
        directory = self.munge_socket.parent
        directory.mkdir(exist_ok=True)
        munge = pwd.getpwnam("munge")
        os.chown(directory, munge.pw_uid, munge.pw_gid)
        directory.chmod(0o755)
        key = directory / "munge.key"  # a key of this cluster's own
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        os.chown(key, munge.pw_uid, munge.pw_gid)
        self._spawn(
            "munged",
            [
                "/usr/sbin/munged",
                "--foreground",
                f"--socket={self.munge_socket}",
                f"--key-file={key}",
                f"--pid-file={directory}/munged.pid",
                f"--log-file={directory}/munged.log",
                f"--seed-file={directory}/munged.seed",
            ],
            user=munge,
        )
        self._wait(lambda: self.munge_socket.exists(), "munged's socket")

    def _spawn(self, name: str, argv: list[str], user: pwd.struct_passwd | None = None) -> None:
        log = open(self.root / "log" / f"{name}.stdout", "ab")  # noqa: SIM115 - the child's
        identity = {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []} if user else {}
        self.processes[name] = subprocess.Popen(
            argv,
            env=self._client_env(),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            **identity,
        )
        log.close()

    def _wait(self, ready, what: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            for name, process in self.processes.items():
                if process.poll() is not None:
                    raise RuntimeError(f"{name} exited {process.returncode}: {self.logs()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out waiting for {what}: {self.logs()}")
            time.sleep(0.1)

    def start(self) -> None:
        self._write_conf()
        self._start_munge()
        self.start_slurmctld()
        self._spawn("slurmd", ["/usr/sbin/slurmd", "-D"])
        self._wait(self.node_idle, "the node to be idle")

    def start_slurmctld(self) -> None:
        """Start slurmctld, recovering its saved state (jobs survive a restart)."""
        self._spawn("slurmctld", ["/usr/sbin/slurmctld", "-D"])
        self._wait(lambda: self.sinfo_states() is not None, "slurmctld to answer")

    def stop_slurmctld(self, *, hard: bool = False) -> None:
        """Stop the controller: SIGTERM (it saves its state first), or with `hard` SIGKILL,
        a crash that loses what it had not saved yet (it saves a job's start only lazily:
        a job that started seconds before is PENDING again after such a restart)."""
        process = self.processes.pop("slurmctld")
        process.kill() if hard else process.terminate()
        process.wait(30)

    def restart_slurmctld(self, *, hard: bool = False) -> None:
        self.stop_slurmctld(hard=hard)
        self.start_slurmctld()

    # -- queries -------------------------------------------------------------------------

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """A Slurm client command against this cluster."""
        return subprocess.run(
            list(argv), env=self._client_env(), capture_output=True, text=True, check=check
        )

    def sinfo_states(self) -> list[str] | None:
        result = self.run("sinfo", "-h", "-N", "-o", "%T", check=False)
        return result.stdout.split() if result.returncode == 0 else None

    def node_idle(self) -> bool:
        states = self.sinfo_states()
        return bool(states) and all(state == "idle" for state in states)

    def job_state(self, job_id: str) -> str | None:
        """squeue's state of a job (PENDING, RUNNING, ...), None once it left squeue."""
        return squeue_state(str(self.conf), job_id)

    def jobs_named(self, name: str) -> list[str]:
        result = self.run("squeue", "-h", "--states", "all", "--name", name, "-o", "%i")
        return result.stdout.split()

    def sbatch(self, *args: str) -> str:
        """Submit a batch job (`--wrap` and the like); its id."""
        result = self.run("sbatch", "--parsable", "--chdir", str(self.root), *args)
        return result.stdout.strip().split(";")[0]

    def settle_after_crash(self, job_id: str) -> None:
        """After a hard controller restart: wait until nothing of `job_id` runs on the node
        (a controller that forgot a job leaves its slurmstepd running until it ends), then
        put the node back in service (a job number handed out again while the old job still
        ran drains it: "Duplicate jobid")."""
        self._wait(lambda: not _stepd_running(job_id), f"job {job_id}'s steps to end", 60)
        # A controller restored from an older save may also hold jobs that ended before the
        # crash as still running (their end was not saved yet): they keep the node
        # ALLOCATED, and a node that is allocated cannot be resumed. Cancel them, then
        # resume until the node is idle.
        self.run("scancel", "--full", "--signal=KILL", "--user=root", check=False)
        self.run("scancel", "--user=root", check=False)
        last_resume = [0.0]

        def idle_again() -> bool:
            if self.node_idle():
                return True
            if time.monotonic() - last_resume[0] > 1:
                last_resume[0] = time.monotonic()
                self.run("scontrol", "update", f"nodename={self.host}", "state=resume", check=False)
            return False

        self._wait(idle_again, "the node to be idle", timeout=60)
        self._burn_numbers_up_to(int(job_id))

    def _burn_numbers_up_to(self, last: int) -> None:
        """Hand out, and cancel at once, every job number a controller that forgot its
        last jobs would give again. slurmd remembers the killed old job's credential as
        revoked for a while and refuses a batch job of that number ("already killed, do not
        launch"): the next test's job would end FAILED as it starts."""
        for _ in range(100):
            number = self.sbatch("--hold", "--job-name=burn", "--wrap", "true")
            self.run("scancel", number, check=False)
            if int(number) > last:
                return
        raise RuntimeError(f"slurmctld still hands out numbers up to {last}")

    def cancel_all(self) -> None:
        """Kill and cancel every job, and wait until the node is idle again."""
        self.run("scancel", "--full", "--signal=KILL", "--user=root", check=False)
        self.run("scancel", "--user=root", check=False)
        self._wait(self.node_idle, "the node to be idle", timeout=60)

    def log(self, daemon: str) -> str:
        """The whole log of `daemon` (slurmctld, slurmd)."""
        return (self.root / "log" / f"{daemon}.log").read_text(errors="replace")

    def logs(self) -> str:
        parts = []
        for path in sorted((self.root / "log").glob("*")):
            with open(path, errors="replace") as handle:
                parts.append(f"--- {path.name}\n" + "".join(handle.readlines()[-20:]))
        return "\n".join(parts)

    # -- teardown ------------------------------------------------------------------------

    def stop(self) -> None:
        """Cancel every job, then stop the daemons (slurmd first) and remove the files."""
        if "slurmctld" in self.processes:
            self.run("scancel", "--full", "--signal=KILL", "--user=root", check=False)
            self.run("scancel", "--user=root", check=False)
        for name in ("slurmd", "slurmctld", "munged"):
            process = self.processes.pop(name, None)
            if process is None:
                continue
            process.terminate()
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)
        # Steps the daemons left behind (a job its controller forgot): this cluster's own,
        # by the SLURM_CONF slurmd gave them, and everything under them.
        marker = f"SLURM_CONF={self.conf}".encode()
        ours = [pid for pid in _stepds() if marker in _read(f"/proc/{pid}/environ").split(b"\0")]
        for pid in _descendants(ours):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.root, ignore_errors=True)


# -- fixtures (registered by tests/providers/conftest.py and tests/integration/conftest.py) --


@pytest.fixture(scope="session")
def slurm_cluster():
    """munged, slurmctld and slurmd of this session. Where they are missing the tests fail
    (`.ci/run` installs them): a provider left untested is no green run."""
    why = available()
    if why:
        pytest.fail(
            f"no Slurm cluster here: {why} (apt-get install slurmctld slurmd "
            "slurm-client munge; .ci/run does it)"
        )
    cluster = SlurmCluster()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def slurm_provider(slurm_cluster, tmp_path):
    """A `slurm` provider on the session's cluster with the only enabled `cpu` offer, so
    the test's jobs are placed there. Needs database access (a django_db test)."""
    from apps.catalog.models import Accelerator, Offer
    from apps.providers.models import Provider

    work_dir = tmp_path / "slurm-work"
    work_dir.mkdir()
    provider = Provider.objects.create(
        name="slurm",
        kind=Provider.Kind.SLURM,
        config={
            "work_dir": str(work_dir),
            "slurm_conf": str(slurm_cluster.conf),
            "partition": "low",
            "slots": 8,
        },
    )
    Offer.objects.filter(accelerator__name="cpu").update(enabled=False)
    Offer.objects.create(
        provider=provider,
        accelerator=Accelerator.objects.get(name="cpu"),
        gpu_counts=[1],
        capacity=8,
        price_per_gpu_hour_micros=100_000,
        min_price_per_gpu_hour_micros=100_000,
        max_price_per_gpu_hour_micros=100_000,
    )
    yield provider
    # Nothing of the test's keeps running into the next one.
    slurm_cluster.cancel_all()
