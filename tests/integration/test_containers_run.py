"""Container jobs through the whole system (web, worker, beat, runner) on podman: the job's
image is what runs, and two organizations' workloads cannot see each other or the control
plane."""

from __future__ import annotations

import base64
import signal
from urllib.parse import urlsplit

import pytest

from apps.accounts import services as account_services
from apps.jobs.models import Artifact, Attempt, LogLine, MetricPoint
from apps.providers.backends.local import container_runtime
from apps.providers.models import Provider
from apps.secrets import services as secret_services
from tests.compute_api import ComputeApi
from tests.containers import MARKER, MARKER_PATH, containers_of_job
from tests.factories import OrganizationFactory
from tests.integration.conftest import TERMINAL, UNTIL_LET_GO, let_go
from tests.integration.stack import wait_for

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


@pytest.fixture
def podman(live_stack, podman_image) -> str:
    """The local provider on podman for this test (the worker reads it per launch)."""
    Provider.objects.filter(name="local").update(config={"runtime": "podman"})
    yield podman_image
    Provider.objects.filter(name="local").update(config={})


def _user_lines(job_id: str) -> list[str]:
    return list(
        LogLine.objects.filter(job__public_id=job_id, source="user")
        .order_by("attempt", "seq", "id")
        .values_list("message", flat=True)
    )


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def test_a_container_job_runs_in_its_image_with_its_exit_code_and_masked_secret(
    api, compute_org, podman
):
    secret = secret_services.secret_create(
        organization=compute_org, name="hub", data={"HF_TOKEN": "s3cr3t-in-container"}
    )
    job = api.submit(
        image=podman,
        command=["bash", "-c", f"cat {MARKER_PATH}; echo token=$HF_TOKEN; exit 3"],
        secret_env={"HF_TOKEN": {"secret_id": secret.public_id, "key": "HF_TOKEN"}},
    )
    done = api.wait_state(job["id"], TERMINAL, timeout=90)
    assert (done["state"], done["reason"], done["exit_code"]) == ("failed", "exit_code_3", 3)
    assert _user_lines(job["id"]) == [MARKER, "token=***"]
    # Released after the terminal state commits: nothing outlives the attempt.
    wait_for(lambda: containers_of_job(job["id"]) == [], timeout=30, what="container removed")


# Run inside each workload: look in every process it can see for the control plane's secrets
# and for any other job's runner, and on its filesystem for the host's work directories.
SNOOP = r"""
import os, re, sys, time
own = os.environ["TRAINYARD_JOB_ID"]
# Spelled in pieces: this script's own command line must not match.
needles = [("SECRET" + suffix + "=").encode() for suffix in ("_KEY", "S_KEYS")]
needles.append(("DATABASE" + "_URL=").encode())
found, seen = set(), set()
deadline = time.time() + 10
while time.time() < deadline:
    for pid in filter(str.isdigit, os.listdir("/proc")):
        seen.add(pid)
        if int(pid) == os.getpid():
            continue
        for part in ("environ", "cmdline"):
            try:
                data = open(f"/proc/{pid}/{part}", "rb").read()
            except OSError:
                continue
            found.update(n.decode() for n in needles if n in data)
            for job in re.findall(rb"job_[A-Za-z0-9]+", data):
                if job.decode() != own:
                    found.add("another job: " + job.decode())
    if os.path.exists(os.environ["HOST_WORK_ROOT"]):
        found.add("the host's work directories")
    time.sleep(0.5)
print(f"processes seen: {len(seen)}")
print("found: " + (", ".join(sorted(found)) or "nothing"))
sys.exit(1 if found else 0)
"""


def test_two_organizations_jobs_at_once_see_neither_each_other_nor_the_control_plane(
    live_stack, podman
):
    jobs = []
    for _ in range(2):
        org = OrganizationFactory(compute_enabled=True)
        _, key = account_services.api_key_create(organization=org, name="it")
        api = ComputeApi(live_stack.url, key)
        env = {"HOST_WORK_ROOT": str(live_stack.workdir / "work")}
        jobs.append((api, api.submit(image=podman, command=["python3", "-c", SNOOP], env=env)))
    results = [api.wait_state(job["id"], TERMINAL, timeout=120) for api, job in jobs]

    for (_, job), done in zip(jobs, results, strict=True):
        lines = _user_lines(job["id"])
        assert "found: nothing" in lines, lines
        assert done["state"] == "succeeded"
    a, b = (Attempt.objects.get(job__public_id=job["id"]) for _, job in jobs)
    assert a.started_at < b.ended_at and b.started_at < a.ended_at  # they ran at once


def test_a_missing_image_fails_the_job_image_pull_failed_naming_it(api, podman):
    image = "localhost/trainyard-no-such-image:1"
    job = api.submit(image=image, command=["true"])
    done = api.wait_state(job["id"], TERMINAL, timeout=60)
    assert (done["state"], done["reason"]) == ("failed", "image_pull_failed")
    system = list(
        LogLine.objects.filter(job__public_id=job["id"], source="system").values_list(
            "message", flat=True
        )
    )
    assert any(image in line for line in system), system


def test_a_worker_killed_mid_launch_leaves_one_container_for_the_attempt(api, stack, podman):
    stack.procs["worker"].stop()
    stack.start_worker(TRAINYARD_FAULT_PAUSE_AFTER_ALLOCATE_S="30")
    try:
        # The workload runs until the test has counted its containers.
        job = api.submit(image=podman, command=["bash", "-c", f"{UNTIL_LET_GO}; echo once"])
        api.wait_state(
            job["id"], {"allocating", "provisioning", "running", "succeeded"}, timeout=60
        )
    finally:
        stack.procs["worker"].stop(signal.SIGKILL)
        stack.start_worker()
    api.wait_state(job["id"], "running", timeout=60)
    assert len(containers_of_job(job["id"])) == 1
    let_go(stack, job["id"])
    done = api.wait_state(job["id"], TERMINAL, timeout=90)
    assert done["state"] == "succeeded"
    assert _user_lines(job["id"]) == ["once"]
    assert len(done["attempts"]) == 1


# Run inside each workload: knock on the host's loopback (where the control plane, its Redis
# and its PostgreSQL listen), then report a metric and a checkpoint the usual way.
KNOCKS = r"""
import json, os, socket, time
reached = []
for name, port in [("redis", REDIS_PORT), ("postgres", 5432), ("web", WEB_PORT)]:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=3).close()
        reached.append(name)
    except OSError as exc:
        print(f"{name}: {type(exc).__name__}")
print("reached: " + (", ".join(reached) or "nothing"), flush=True)
print(json.dumps({"type": "metrics", "step": 1, "loss": 0.25}), flush=True)
ck = os.path.join(os.getcwd(), os.environ["TRAINYARD_CHECKPOINT_DIR"], "checkpoint-1")
os.makedirs(ck)
open(os.path.join(ck, "model.bin"), "w").write("weights\n")
print(json.dumps({"type": "checkpoint", "step": 1, "path": ck}), flush=True)
while not os.path.exists("go"):
    time.sleep(0.1)
"""


def test_a_workload_reaches_nothing_on_the_hosts_loopback_yet_its_runner_reports(
    live_stack, podman
):
    """Two organizations' container jobs: each on a network of its own (slirp4netns), the
    host's Redis, PostgreSQL and web port refused, while logs, metrics and a checkpoint
    still arrive through the attempt's control socket."""
    script = KNOCKS.replace("REDIS_PORT", str(urlsplit(live_stack.redis_url).port or 6379))
    script = script.replace("WEB_PORT", str(urlsplit(live_stack.url).port))
    jobs = []
    for _ in range(2):
        org = OrganizationFactory(compute_enabled=True)
        _, key = account_services.api_key_create(organization=org, name="it")
        api = ComputeApi(live_stack.url, key)
        jobs.append((api, api.submit(image=podman, command=["python3", "-c", script])))
    for api, job in jobs:
        api.wait_state(job["id"], "running", timeout=90)
        wait_for(
            lambda job=job: any(line.startswith("reached:") for line in _user_lines(job["id"])),
            timeout=60,
            what="the workload's knocks",
        )
        (name,) = containers_of_job(job["id"])
        mode = container_runtime("podman").cli(
            "container", "inspect", "--format", "{{.HostConfig.NetworkMode}}", name
        )
        assert mode.stdout.strip() == "slirp4netns"
    for _, job in jobs:
        let_go(live_stack, job["id"])
    for api, job in jobs:
        done = api.wait_state(job["id"], TERMINAL, timeout=90)
        lines = _user_lines(job["id"])
        assert done["state"] == "succeeded", lines
        assert "reached: nothing" in lines, lines
        assert {"redis: ConnectionRefusedError", "postgres: ConnectionRefusedError"} <= set(lines)
        assert MetricPoint.objects.filter(job__public_id=job["id"], step=1, loss=0.25).exists()
        assert Artifact.objects.filter(job__public_id=job["id"], kind="checkpoint").exists()


def test_a_container_that_cannot_start_fails_launch_failed_with_the_runtimes_words(api, podman):
    """The OCI runtime refuses (a device that does not exist): the job fails within one
    dispatch, the runtime's message in its system log, no container left, billing stopped."""
    Provider.objects.filter(name="local").update(
        config={"runtime": "podman", "run_args": "--device /dev/trainyard-no-such-device"}
    )
    job = api.submit(image=podman, command=["true"])
    done = api.wait_state(job["id"], TERMINAL, timeout=30)

    assert (done["state"], done["reason"]) == ("failed", "launch_failed")
    system = list(
        LogLine.objects.filter(job__public_id=job["id"], source="system").values_list(
            "message", flat=True
        )
    )
    assert any("/dev/trainyard-no-such-device" in line for line in system), system
    assert containers_of_job(job["id"]) == []
    attempt = Attempt.objects.get(job__public_id=job["id"])
    assert attempt.ended_at is not None


def test_terminating_a_job_whose_container_cannot_start_ends_it(api, podman):
    Provider.objects.filter(name="local").update(
        config={"runtime": "podman", "run_args": "--device /dev/trainyard-no-such-device"}
    )
    job = api.submit(image=podman, command=["true"])
    api.terminate(job["id"])
    done = api.wait_state(job["id"], TERMINAL, timeout=30)

    assert done["state"] in {"terminated", "failed"}
    assert containers_of_job(job["id"]) == []


# Stdlib only (the test image has python3 and nothing else): what any HTTP client would do.
READ_THE_HUB = r"""
import os, urllib.error, urllib.request
endpoint, token = os.environ["HF_ENDPOINT"], os.environ["HF_TOKEN"]
auth = {"Authorization": "Bearer " + token}
def status(url, data=None):
    try:
        return urllib.request.urlopen(urllib.request.Request(url, data, auth)).status
    except urllib.error.HTTPError as err:
        return err.code
print("endpoint=" + endpoint.split(":")[0] + ":" + endpoint.split(":")[1])
answer = urllib.request.urlopen(urllib.request.Request(
    endpoint + "/" + os.environ["REPO"] + "/resolve/main/hello.txt", headers=auth))
print("content=" + answer.read().decode())
print(f"write={status(endpoint + '/api/repos/create', b'{}')}")
print(f"other={status(endpoint + '/api/models/' + os.environ['OTHER'])}")
print(f"runner_api={status(endpoint.rsplit('/hf', 1)[0] + '/api/v1/compute/jobs')}")
"""


def test_a_container_job_reads_the_hub_through_a_door_on_its_own_loopback(
    api, compute_org, live_stack, podman
):
    from tests.integration.test_hub_run import hub_repo_with_a_file

    own = hub_repo_with_a_file(live_stack, compute_org, "greeting", "hello through the socket")
    other = hub_repo_with_a_file(live_stack, OrganizationFactory(), "secret", "no")
    job = api.submit(
        image=podman,
        command=["python3", "-c", READ_THE_HUB],
        env={"REPO": own, "OTHER": other},
    )
    done = api.wait_state(job["id"], TERMINAL, timeout=90)

    lines = _user_lines(job["id"])
    assert done["state"] == "succeeded", lines
    assert lines == [
        "endpoint=http://127.0.0.1",  # the workload's own loopback: it has no route out
        "content=hello through the socket",
        "write=405",
        "other=404",
        "runner_api=403",
    ]


# Run in a container: whether the hub's file was in the cache before this job fetched it.
FETCH_TWICE = """
import os
from huggingface_hub import hf_hub_download, try_to_load_from_cache
print("cache=" + os.environ["HF_HUB_CACHE"])
before = try_to_load_from_cache(os.environ["REPO"], "hello.txt")
print("before=" + ("cached" if isinstance(before, str) else "none"))
print("content=" + open(hf_hub_download(os.environ["REPO"], "hello.txt")).read())
repos = [name for name in os.listdir(os.environ["HF_HUB_CACHE"]) if name.startswith("models--")]
print("repos=" + ",".join(sorted(repos)))
"""


def test_a_second_job_of_an_organization_finds_the_hub_download_in_its_cache(
    api, compute_org, live_stack, podman, trainer_image
):
    """The local provider keeps a Hugging Face cache per organization: a later attempt (of
    this job or another) does not download again; another organization's workloads never
    see it."""
    from tests.integration.test_hub_run import hub_repo_with_a_file

    own = hub_repo_with_a_file(live_stack, compute_org, "greeting", "cached once")

    def run(client, org_repo: str) -> list[str]:
        job = client.submit(
            image=trainer_image, command=["python3", "-c", FETCH_TWICE], env={"REPO": org_repo}
        )
        done = client.wait_state(job["id"], TERMINAL, timeout=90)
        lines = _user_lines(job["id"])
        assert done["state"] == "succeeded", lines
        return lines

    first, second = run(api, own), run(api, own)
    assert first[:3] == ["cache=/var/cache/trainyard-hub", "before=none", "content=cached once"]
    assert second[:3] == ["cache=/var/cache/trainyard-hub", "before=cached", "content=cached once"]
    assert second[3] == "repos=models--" + own.replace("/", "--")

    other_org = OrganizationFactory(compute_enabled=True)
    _, key = account_services.api_key_create(organization=other_org, name="other")
    theirs = hub_repo_with_a_file(live_stack, other_org, "greeting", "theirs")
    elsewhere = run(ComputeApi(live_stack.url, key), theirs)
    assert elsewhere[1] == "before=none"
    assert elsewhere[3] == "repos=models--" + theirs.replace("/", "--")  # not ours
