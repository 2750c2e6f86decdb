"""What the benchmarks that run the real stack share: a database of their own, Django set up
on it, the stack (web, worker, beat) with production timings, and cleanup of runners."""

from __future__ import annotations

import os
import signal
import sys
from contextlib import suppress
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
ADMIN_URL = os.environ.get("BENCH_ADMIN_URL", "postgres://postgres@127.0.0.1:5432/postgres")
TERMINAL = {"succeeded", "failed", "terminated"}
# The integration tests shorten these; the benches measure what production runs.
TEST_TIMINGS = (
    "RECONCILE_INTERVAL_S",
    "HEARTBEAT_INTERVAL_S",
    "HEARTBEAT_TIMEOUT_S",
    "TERMINATE_GRACE_S",
    "LAUNCH_STALL_S",
    "LOG_BATCH_MAX_INTERVAL_S",
    "TRAINYARD_CLOCK_SCALE",
    "PREEMPTION_MAX_PER_JOB",
)


def group_cpu_s(pgid: int) -> float:
    """CPU seconds (user + system) used so far by the live processes of a process group."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:  # after the name: state, ppid, pgrp, ..., utime, stime
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def cpu_by_part(groups: dict[str, int], pids: dict[str, int] | None = None) -> dict[str, float]:
    """CPU seconds used so far by each part of the machine: the process groups in `groups`
    and the single processes in `pids` by their names, then PostgreSQL, Redis and Chromium by
    their command names, `other` for the rest, and `steal`: the time the hypervisor gave
    this machine's cores to someone else (all cores together; a virtual machine's runs differ
    by it)."""
    tick = os.sysconf("SC_CLK_TCK")
    by_group = {pgid: name for name, pgid in groups.items()}
    by_pid = {pid: name for name, pid in (pids or {}).items()}
    totals = dict.fromkeys(
        [*groups, *(pids or {}), "postgres", "redis", "chromium", "other", "steal"], 0.0
    )
    with open("/proc/stat") as stat:  # cpu  user nice system idle iowait irq softirq steal
        totals["steal"] = int(stat.readline().split()[8]) / tick
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "stat").read_text()
        except OSError:
            continue
        comm = raw[raw.index("(") + 1 : raw.rindex(")")]
        fields = raw.rpartition(")")[2].split()
        name = by_pid.get(int(entry.name)) or by_group.get(int(fields[2]))
        if name is None:
            if comm.startswith("postgres"):
                name = "postgres"
            elif comm.startswith("redis"):
                name = "redis"
            elif comm.startswith(("chrom", "headless")):
                name = "chromium"
            else:
                name = "other"
        totals[name] += (int(fields[11]) + int(fields[12])) / tick
    return totals


def web_answers(port: int) -> bool:
    """Whether a web server on 127.0.0.1:`port` answers its health check."""
    import http.client

    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
        conn.request("GET", "/healthz")
        return conn.getresponse().status == 200
    except OSError:
        return False


def database_url(name: str) -> str:
    return f"{ADMIN_URL.rsplit('/', 1)[0]}/{name}"


def recreate_database(name: str) -> None:
    import psycopg

    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def setup_django(name: str, redis_url: str) -> None:
    """Recreate database `name`, point this process at it and `redis_url`, migrate."""
    recreate_database(name)
    os.environ["DATABASE_URL"] = database_url(name)
    os.environ["REDIS_URL"] = redis_url  # the Celery app here talks through the stack's broker
    os.environ["DJANGO_SETTINGS_MODULE"] = "config.test_settings"
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def production_stack(name: str, redis_url: str, workdir: Path):
    from tests.integration.stack import Stack

    class ProductionTimingStack(Stack):
        def env(self, **extra: str) -> dict[str, str]:
            env = super().env(**extra)
            for variable in TEST_TIMINGS:
                if variable not in extra:
                    env.pop(variable, None)
            return env

    return ProductionTimingStack(
        database_url=database_url(name), redis_url=redis_url, workdir=workdir
    )


def stop_runners() -> None:
    """Stop every runner the worker started (their own process groups outlive the worker)."""
    from apps.jobs.models import Attempt
    from runner import procfs

    for handle in Attempt.objects.exclude(handle={}).values_list("handle", flat=True):
        if "pid" not in handle or "pgid" not in handle:
            continue  # a container, or a Slurm job: its backend's release ended it
        if procfs.alive(handle["pid"], handle.get("start_ticks")):
            with suppress(ProcessLookupError):
                os.killpg(handle["pgid"], signal.SIGKILL)


def terminate_unfinished(terminate) -> None:
    """Ask, through `terminate(job_id)` (the bench's own API client), for every job not yet
    ended to stop, so no runner outlives the run; failures are ignored (it is cleanup)."""
    from apps.jobs.models import Job

    for job_id in Job.objects.exclude(state__in=TERMINAL).values_list("public_id", flat=True):
        with suppress(Exception):
            terminate(job_id)
