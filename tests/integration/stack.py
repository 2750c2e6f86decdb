"""A real Trainyard for integration tests: the ASGI web server (uvicorn), a Celery worker and
Celery beat, as separate processes on the test database and a Redis database of their own.
Each can be stopped, killed and restarted, so tests can crash parts mid-flight."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

import redis
import requests

from tests.live import BIN, ROOT, free_port, wait_until

STACK_ENV = {
    "DJANGO_SETTINGS_MODULE": "config.test_settings",
    # 10.0.2.2: the host's loopback as the emulated Kubernetes cluster's pods reach it.
    "ALLOWED_HOSTS": "127.0.0.1,localhost,10.0.2.2",
    "RECONCILE_INTERVAL_S": "1",
    "HEARTBEAT_INTERVAL_S": "1",
    "HEARTBEAT_TIMEOUT_S": "60",
    "TERMINATE_GRACE_S": "3",
    # The preemption cap test reclaims a job three times.
    "PREEMPTION_MAX_PER_JOB": "2",
    "LAUNCH_STALL_S": "4",
    # Waiting jobs are swept for dispatch this often besides when capacity frees.
    "DISPATCH_SWEEP_S": "2",
    "LOG_BATCH_MAX_INTERVAL_S": "0.1",
    # One wall-clock second counts as one minute for runtime limits and billing.
    "TRAINYARD_CLOCK_SCALE": "60",
    "DATABASE_POOL": "1",
    # Endpoints and their engines are synced at once on every change; this is the net.
    "SERVING_SYNC_INTERVAL_S": "3",
}


@dataclass
class Proc:
    name: str
    args: list[str]
    log: Path
    popen: subprocess.Popen | None = None

    def start(self, env: dict[str, str]) -> None:
        with open(self.log, "ab") as out:
            self.popen = subprocess.Popen(
                self.args,
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def signal_group(self, sig: int) -> None:
        if self.popen is not None and self.popen.poll() is None:
            with suppress(ProcessLookupError):
                os.killpg(self.popen.pid, sig)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15) -> None:
        if self.popen is None:
            return
        self.signal_group(sig)
        try:
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.signal_group(signal.SIGKILL)
            self.popen.wait(timeout=timeout)
        self.popen = None

    def tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


@dataclass
class Stack:
    database_url: str
    redis_url: str
    workdir: Path
    port: int = field(default_factory=free_port)
    gateway_port: int = field(default_factory=free_port)  # the SSH gateway, when started
    procs: dict[str, Proc] = field(default_factory=dict)
    web_workers: int = 1  # uvicorn --workers (the Procfile's WEB_WORKERS)
    worker_concurrency: int = 2  # celery --concurrency (the Procfile's WORKER_CONCURRENCY)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
        env.update(STACK_ENV)
        env.update(
            {
                "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}",
                "DATABASE_URL": self.database_url,
                "REDIS_URL": self.redis_url,
                "TRAINYARD_PUBLIC_URL": self.url,
                "LOCAL_WORK_DIR": str(self.workdir / "work"),
                "TRAINYARD_VAR_DIR": str(self.workdir / "var"),
                "SSH_GATEWAY_PORT": str(self.gateway_port),
            }
        )
        env.update(extra)
        return env

    def _proc(self, name: str, args: list[str]) -> Proc:
        if name not in self.procs:
            self.procs[name] = Proc(name, args, self.workdir / f"{name}.log")
        return self.procs[name]

    def start_web(self) -> None:
        web = self._proc(
            "web",
            [
                str(BIN / "uvicorn"),
                "config.asgi:application",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--log-level",
                "warning",
                "--workers",
                str(self.web_workers),
            ],
        )
        web.start(self.env())
        wait_until(lambda: web_answers(self.url), timeout=30, what=f"web server\n{web.tail()}")

    def start_worker(self, **extra: str) -> None:
        worker = self._proc(
            "worker",
            [
                str(BIN / "celery"),
                "-A",
                "config",
                "worker",
                "--loglevel",
                "INFO",
                "--concurrency",
                str(self.worker_concurrency),
                "--without-gossip",
                "--without-mingle",
                "-n",
                f"it-{self.port}@%h",
            ],
        )
        size = worker.log.stat().st_size if worker.log.exists() else 0
        worker.start(self.env(**extra))
        wait_until(
            lambda: b" ready." in worker.log.read_bytes()[size:],
            timeout=60,
            what=f"celery worker\n{worker.tail()}",
        )

    def start_beat(self) -> None:
        beat = self._proc(
            "beat",
            [
                str(BIN / "celery"),
                "-A",
                "config",
                "beat",
                "--loglevel",
                "INFO",
                "--schedule",
                str(self.workdir / "beat-schedule"),
            ],
        )
        beat.start(self.env())

    def start_gateway(self) -> None:
        """The SSH gateway (`manage.py ssh_gateway`), once: later calls find it running. It
        starts with the stack, so its port is taken as soon as it was chosen (a port chosen
        free and bound minutes later may meanwhile be another worker's)."""
        gateway = self._proc("ssh", [sys.executable, str(ROOT / "manage.py"), "ssh_gateway"])
        if gateway.popen is not None and gateway.popen.poll() is None:
            return
        size = gateway.log.stat().st_size if gateway.log.exists() else 0
        gateway.start(self.env())

        def listening() -> bool:
            if gateway.popen is None or gateway.popen.poll() is not None:
                raise RuntimeError(f"the SSH gateway exited:\n{gateway.tail()}")
            return b"SSH gateway listening" in gateway.log.read_bytes()[size:]

        wait_until(listening, timeout=30, what=f"SSH gateway\n{gateway.tail()}")

    def start(self) -> None:
        redis.Redis.from_url(self.redis_url).flushdb()
        self.start_web()
        self.start_gateway()
        self.start_worker()
        self.start_beat()

    @property
    def worker_name(self) -> str:
        return f"it-{self.port}@{socket.gethostname()}"

    def pause_workers(self) -> None:
        """Stop the worker taking tasks and wait until it runs none, so the stack holds no
        database locks while the test database is flushed between tests (a TRUNCATE racing a
        reconcile pass can deadlock)."""
        from config.celery import app

        worker = self.procs.get("worker")
        if worker is None or worker.popen is None or worker.popen.poll() is not None:
            return
        destination = [self.worker_name]

        def consuming() -> bool:
            queues = app.control.inspect(destination=destination, timeout=2).active_queues()
            return any(q.get("name") == "celery" for q in (queues or {}).get(self.worker_name, []))

        # Until it says it stopped: a cancel lost on a loaded machine would leave it taking
        # the next test's tasks while the database is flushed.
        wait_until(
            lambda: (
                app.control.cancel_consumer(
                    "celery", destination=destination, reply=True, timeout=5
                )
                and not consuming()
            ),
            timeout=30,
            interval=0.5,
            what="the worker to stop taking tasks",
        )
        wait_until(
            lambda: (
                not any(
                    (
                        app.control.inspect(destination=destination, timeout=2).active() or {}
                    ).values()
                )
            ),
            timeout=60,
            interval=0.2,
            what="the worker to go idle",
        )

    def resume_workers(self) -> None:
        from config.celery import app

        worker = self.procs.get("worker")
        if worker is None or worker.popen is None or worker.popen.poll() is not None:
            return
        app.control.purge()  # what beat queued meanwhile was about the previous test
        app.control.add_consumer("celery", destination=[self.worker_name], reply=True, timeout=5)

    def stop(self) -> None:
        for proc in self.procs.values():
            proc.stop()

    def logs(self, lines: int = 40) -> str:
        return "\n\n".join(f"== {p.name}\n{p.tail(lines)}" for p in self.procs.values())


def web_answers(url: str) -> bool:
    """Whether the web server at `url` answers its health check."""
    try:
        return requests.get(f"{url}/healthz", timeout=1).status_code == 200
    except requests.RequestException:
        return False


def python_command(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def wait_for(predicate, timeout: float, what: str, interval: float = 0.2):
    return wait_until(predicate, timeout=timeout, interval=interval, what=what)


__all__ = ["Stack", "python_command", "time", "wait_for"]
