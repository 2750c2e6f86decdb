"""Providers side by side: submit → running through `ssh` and `slurm` against `local`, and
what one `poll` of a live attempt costs on each (reconcile polls every live attempt once a
pass, so this is the pass's cost per attempt).

- A real sshd on loopback (the far host is this machine) and a real single-node Slurm
  cluster (munged, slurmctld, slurmd) are started for the run, from the same code the tests
  use (`tests.providers.sshd`, `tests.providers.slurm_cluster`), and stopped at the end.
- Each provider has a `cpu` offer at one price; before each submit only the provider under
  test keeps its offer enabled. The local provider runs the host runtime.
- Dispatch: `BENCH_PROVIDERS_JOBS` jobs (default 5) of `sleep 1` per provider, interleaved
  (local, ssh, slurm, local, ...), one at a time, each timed from the POST's answer to the
  first GET that shows `running` (polling every 20 ms). One warm-up job per provider is not
  counted (it installs the runner bundle on the far side and opens the SSH connection).
- Poll: two `sleep 300` jobs per provider are started; then each live attempt is polled
  `POLLS` times through its backend, here, and the median of each provider is printed.

The stack (web, worker, beat) runs with production timings. Its own database
(`trainyard_bench_providers`) and Redis database (`BENCH_PROVIDERS_REDIS_URL`, default 13).
Needs openssh-server, slurmctld, slurmd, slurm-client and munge (`.ci/run` installs them).

    .venv/bin/python bench/bench_providers.py
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from common import JobsApi, api_key, funded_org
from live_stack import (
    TERMINAL,
    production_stack,
    setup_django,
    stop_runners,
    terminate_unfinished,
)

BENCH_DB = "trainyard_bench_providers"
REDIS_URL = os.environ.get("BENCH_PROVIDERS_REDIS_URL", "redis://127.0.0.1:6379/13")
JOBS = int(os.environ.get("BENCH_PROVIDERS_JOBS", 5))
LIVE_PER_PROVIDER = 2  # the test cluster has two CPUs
POLLS = 10
POLL_S = 0.02
KINDS = ("local", "ssh", "slurm")
PROVIDERS = {"local": "local", "ssh": "bench-ssh", "slurm": "bench-slurm"}
PRICE_MICROS = 100_000


def submit_to_running(api: JobsApi, kind: str) -> float:
    """Seconds from the POST's answer to a GET showing `running` for a job on `kind`'s
    provider; returns once it ended."""
    route_to(kind)
    job_id = api.submit("bench-providers", ["sleep", "1"])
    start = time.perf_counter()
    while (state := api.state(job_id)) != "running":
        assert state not in TERMINAL, f"{job_id} ended {state} before running: {api.why(job_id)}"
        assert time.perf_counter() - start < 120, f"{job_id} still {state} after 120 s"
        time.sleep(POLL_S)
    took = time.perf_counter() - start
    assert api.wait(job_id, TERMINAL) == "succeeded", f"{job_id} failed: {api.why(job_id)}"
    return took


def add_providers(sshd, cluster, root: Path) -> None:
    """An SSH and a Slurm provider beside `local`, each with a `cpu` offer at one price."""
    from apps.catalog.models import Accelerator, Offer
    from apps.providers.models import Provider

    ssh = Provider(
        name="bench-ssh",
        kind=Provider.Kind.SSH,
        config={
            "host": sshd.host,
            "port": sshd.port,
            "user": sshd.user,
            "host_key": sshd.host_key,
            "work_dir": str(root / "ssh-work"),
            "python": "/usr/bin/python3",
            "slots": 4,
            "multi_tenant": True,
        },
    )
    ssh.set_credentials({"private_key": sshd.private_key})
    ssh.save()
    (root / "slurm-work").mkdir()
    slurm = Provider.objects.create(
        name="bench-slurm",
        kind=Provider.Kind.SLURM,
        config={
            "work_dir": str(root / "slurm-work"),
            "slurm_conf": str(cluster.conf),
            "partition": "low",
            "slots": 4,
            "multi_tenant": True,
        },
    )
    local = Provider.objects.get(name="local")
    local.config = {"runtime": "host", "multi_tenant": True, "work_dir": str(root / "local")}
    local.save()
    cpu = Accelerator.objects.get(name="cpu")
    Offer.objects.filter(provider=local).delete()
    for provider in (local, ssh, slurm):
        Offer.objects.create(
            provider=provider,
            accelerator=cpu,
            gpu_counts=[1],
            capacity=4,
            price_per_gpu_hour_micros=PRICE_MICROS,
            min_price_per_gpu_hour_micros=PRICE_MICROS,
            max_price_per_gpu_hour_micros=PRICE_MICROS,
        )


def route_to(kind: str) -> None:
    """Only `kind`'s provider takes new jobs (every offer is a cpu offer at one price)."""
    from apps.catalog.models import Offer

    Offer.objects.update(enabled=False)
    Offer.objects.filter(provider__name=PROVIDERS[kind]).update(enabled=True)


def poll_medians_ms(api: JobsApi) -> dict[str, float]:
    """Start LIVE_PER_PROVIDER long jobs on each provider, poll each live attempt POLLS
    times through its backend, and return the median poll time of each kind."""
    from apps.jobs.models import Attempt
    from apps.providers.backends import backend_for

    live: dict[str, list[str]] = {}
    for kind in KINDS:
        route_to(kind)
        live[kind] = [
            api.submit("bench-providers", ["sleep", "300"]) for _ in range(LIVE_PER_PROVIDER)
        ]
        for job_id in live[kind]:
            api.wait(job_id, {"running"})
    medians = {}
    for kind, job_ids in live.items():
        samples = []
        for job_id in job_ids:
            attempt = Attempt.objects.select_related("provider").get(job__public_id=job_id)
            backend = backend_for(attempt.provider)
            for _ in range(POLLS):
                start = time.perf_counter()
                result = backend.poll(attempt.handle)
                samples.append((time.perf_counter() - start) * 1000)
                assert result.state == "running", (kind, result)
        medians[kind] = statistics.median(samples)
        for job_id in job_ids:
            api.terminate(job_id)
    for job_ids in live.values():
        for job_id in job_ids:
            api.wait(job_id, TERMINAL)
    return medians


def main() -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.providers.slurm_cluster import SlurmCluster, available
    from tests.providers.sshd import make_sshd

    why = available()
    if why:
        print(f"bench_providers needs a Slurm cluster here: {why}", file=sys.stderr)
        return 1
    # The bench polls job states every 20 ms: more than a user's key may ask a minute.
    os.environ["API_REQUESTS_PER_MINUTE"] = "100000"
    setup_django(BENCH_DB, REDIS_URL)
    key = api_key(funded_org("bench-providers"))

    with tempfile.TemporaryDirectory(prefix="bench-providers-") as workdir, ExitStack() as stop:
        root = Path(workdir)
        root.chmod(0o755)
        sshd = make_sshd(root / "sshd")
        sshd.start()
        stop.callback(sshd.stop)
        cluster = SlurmCluster()
        cluster.start()
        stop.callback(cluster.stop)
        add_providers(sshd, cluster, root)
        stack = production_stack(BENCH_DB, REDIS_URL, root / "stack")
        api = None
        try:
            (root / "stack").mkdir()
            stack.start()
            api = JobsApi(stack.url, key)
            for kind in KINDS:
                submit_to_running(api, kind)  # warm-up
            took: dict[str, list[float]] = {kind: [] for kind in KINDS}
            for _ in range(JOBS):
                for kind in KINDS:
                    took[kind].append(submit_to_running(api, kind))
            polls = poll_medians_ms(api)
        except Exception:
            print(stack.logs(), file=sys.stderr)
            raise
        finally:
            if api is not None:
                terminate_unfinished(api.terminate)
            stack.stop()
            stop_runners()
            cluster.cancel_all()

    local_ms = statistics.median(took["local"]) * 1000
    for kind in KINDS:
        median_ms = statistics.median(took[kind]) * 1000
        print(
            f"providers: {kind} submit → running median {median_ms:.0f} ms over {JOBS} jobs "
            f"(ratio to local {median_ms / local_ms:.2f}); poll of a live attempt median "
            f"{polls[kind]:.3f} ms (ratio to local {polls[kind] / polls['local']:.0f})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
