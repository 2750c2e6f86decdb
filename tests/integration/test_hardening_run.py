"""Security hardening, checked on the real stack (web, worker, beat, host-runtime runners):

- the runner token is in no environment and no file the workload can read;
- a token stops working once its attempt has ended, past a short grace;
- a workload that exits 143 by itself fails (it is not a reclaim) and pays its minute;
- a job whose secret was deleted before it ran fails `secret_missing` at once, naming it.
"""

from __future__ import annotations

import hashlib
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import requests
from django.utils import timezone

from apps.jobs.execution.tokens import token_for
from apps.jobs.models import Artifact, Attempt, Job, JobEvent
from apps.jobs.runner_api.auth import TOKEN_GRACE_AFTER_END_S
from apps.secrets import services as secret_services
from runner import protocol
from tests.integration.conftest import TERMINAL
from tests.integration.stack import wait_for

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

# Copies whatever of its runner it can read into ./loot: the runner's environment (its
# parent's /proc/<pid>/environ), every file of the attempt's work directory, and its own
# environment. The test, which knows the token, looks for it there.
LOOTER = r"""
import os, pathlib, shutil
loot = pathlib.Path("loot")
loot.mkdir()
try:
    (loot / "runner-environ").write_bytes(open(f"/proc/{os.getppid()}/environ", "rb").read())
    print("runner environ: read")
except OSError as exc:
    print(f"runner environ: {exc.strerror}")
try:
    open(f"/proc/{os.getppid()}/mem", "rb").close()
    print("runner mem: opened")
except OSError as exc:
    print(f"runner mem: {exc.strerror}")
workdir = pathlib.Path.cwd().parent
copied = []
for path in sorted(workdir.rglob("*")):
    if path.is_relative_to(loot.resolve()) or not path.is_file():
        continue
    try:
        target = loot / "files" / path.relative_to(workdir)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
        copied.append(str(path.relative_to(workdir)))
    except OSError:
        pass
(loot / "own-environ").write_text("\n".join(f"{k}={v}" for k, v in os.environ.items()))
print("copied:", " ".join(copied))
"""


def _user_lines(api, job_id: str) -> list[str]:
    return [line["message"] for line in api.logs(job_id, source="user")]


def test_the_workload_finds_the_runner_token_in_no_environment_and_no_file(api):
    job = api.submit(command=["python", "-c", LOOTER])
    done = api.wait_state(job["id"], TERMINAL, timeout=60)
    assert done["state"] == "succeeded", _user_lines(api, job["id"])
    attempt = Attempt.objects.get(job__public_id=job["id"])
    token = token_for(attempt.token_nonce).encode()
    workdir = Path(attempt.handle["workdir"])
    loot = workdir / "work" / "loot"

    lines = _user_lines(api, job["id"])
    copied = next(line for line in lines if line.startswith("copied:")).split()[1:]
    assert "runner.pid" in copied and "spool.jsonl" in copied  # it could read the workdir
    assert "runner.token" not in copied  # deleted before the workload started
    environ = next(line for line in lines if line.startswith("runner environ:"))
    if environ == "runner environ: read":  # a runner of the same user as root only
        runner_env = (loot / "runner-environ").read_bytes()
        assert f"{protocol.ENV_JOB_ID}={job['id']}".encode() in runner_env
    else:  # the runner is not dumpable: its /proc entries are closed to its workload
        assert environ == "runner environ: Permission denied"
        assert "runner mem: Permission denied" in lines
    for path in loot.rglob("*"):
        if path.is_file():
            assert token not in path.read_bytes(), path
    # Nor is it anywhere in the work directory now, nor in the stored log.
    for path in workdir.rglob("*"):
        if path.is_file():
            assert token not in path.read_bytes(), path
    assert not any(token.decode() in line["message"] for line in api.logs(job["id"]))


def _runner_call(stack, job_id: str, token: str, endpoint: str, **kwargs) -> requests.Response:
    headers = {"Authorization": f"Bearer {token}", protocol.PROTOCOL_HEADER: "1"}
    headers.update(kwargs.pop("headers", {}))
    return requests.post(
        f"{stack.url}/api/v1/runner/jobs/{job_id}/{endpoint}",
        headers=headers,
        timeout=10,
        **kwargs,
    )


def test_a_token_stops_working_once_its_attempt_has_been_over_for_the_grace(api, stack):
    job = api.submit(command=["bash", "-c", "echo done"])
    assert api.wait_state(job["id"], TERMINAL)["state"] == "succeeded"
    attempt = Attempt.objects.get(job__public_id=job["id"])
    token = token_for(attempt.token_nonce)
    line = {
        "seq": 1000,
        "ts": datetime.now(UTC).isoformat(),
        "source": "system",
        "stream": "stdout",
        "message": "a line after the end",
    }
    body = b"\x1f\x8b late checkpoint"
    upload = {
        "params": {"kind": "checkpoint", "step": "9"},
        "data": body,
        "headers": {
            "Content-Type": "application/gzip",
            protocol.SHA256_HEADER: hashlib.sha256(body).hexdigest(),
        },
    }

    # Inside the grace: the final flush still gets through.
    assert _runner_call(stack, job["id"], token, "logs", json={"lines": [line]}).status_code == 200

    Attempt.objects.filter(pk=attempt.pk).update(
        ended_at=timezone.now() - timedelta(seconds=TOKEN_GRACE_AFTER_END_S + 5)
    )
    answers = {
        "logs": _runner_call(stack, job["id"], token, "logs", json={"lines": [line]}),
        "heartbeat": _runner_call(stack, job["id"], token, "heartbeat", json={"last_seq": 1}),
        "artifacts": _runner_call(stack, job["id"], token, "artifacts", **upload),
    }
    assert {name: r.status_code for name, r in answers.items()} == dict.fromkeys(answers, 401)
    assert {r.json()["error"]["type"] for r in answers.values()} == {"unauthenticated"}
    assert not Artifact.objects.filter(job__public_id=job["id"]).exists()


def test_a_workload_that_exits_143_by_itself_fails_and_is_billed(api):
    # Its own SIGTERM: no reclaim was recorded, so this is its exit, not a preemption.
    job = api.submit(command=["bash", "-c", "echo once; kill -TERM $$"])
    done = api.wait_state(job["id"], TERMINAL, timeout=60)
    assert (done["state"], done["reason"], done["exit_code"]) == ("failed", "exit_code_143", 143)
    assert done["preemption_count"] == 0
    [attempt] = done["attempts"]
    assert attempt["end_reason"] == "exit_code_143"
    assert attempt["billed_minutes"] >= 1 and attempt["billed_usd"] > 0
    assert done["accrued_usd"] > 0


def _submit_solo(api, solo: str, **container) -> str:
    response = api.session.post(
        f"{api.base}/api/v1/compute/jobs",
        json={
            "name": "solo",
            "compute": {"accelerator": solo, "gpu_count": 1, "ephemeral_disk_gb": 1},
            "container": {"image": "local", **container},
        },
        headers={"Idempotency-Key": uuid.uuid4().hex},
        timeout=10,
    )
    assert response.status_code == 201, response.text
    return response.json()["id"]


def test_a_job_whose_secret_was_deleted_before_it_ran_fails_secret_missing(api, compute_org, solo):
    secret = secret_services.secret_create(
        organization=compute_org, name="hub", data={"HF_TOKEN": "hf_deleted-value"}
    )
    holder = _submit_solo(api, solo, command=["sleep", "600"])
    api.wait_state(holder, "running", timeout=60)
    job_id = _submit_solo(
        api,
        solo,
        command=["bash", "-c", "echo should never run"],
        secret_env={"HF_TOKEN": {"secret_id": secret.public_id, "key": "HF_TOKEN"}},
    )
    secret_services.secret_delete(secret=secret)
    api.terminate(holder)  # the slot frees; the job is placed and its runner asks for its spec

    done = api.wait_state(job_id, TERMINAL, timeout=60)
    assert (done["state"], done["reason"]) == ("failed", "secret_missing")
    assert done["preemption_count"] == 0 and len(done["attempts"]) == 1
    assert secret.public_id in Job.objects.get(public_id=job_id).error_message
    failed = JobEvent.objects.filter(job__public_id=job_id, type="state_changed").last()
    assert (failed.data["secret_id"], failed.data["key"]) == (secret.public_id, "HF_TOKEN")
    assert _user_lines(api, job_id) == []  # the workload never started
    system = [line["message"] for line in api.logs(job_id, source="system")]
    assert any(secret.public_id in line for line in system)
    # The runner was told to stop and did: nothing of the attempt runs on.
    handle = Attempt.objects.get(job__public_id=job_id).handle
    wait_for(
        lambda: (
            not Path(f"/proc/{handle['pid']}").exists()
            or Path(f"/proc/{handle['pid']}/stat").read_text().split(") ")[1][0] in "ZX"
        ),
        timeout=20,
        what="the runner to exit",
    )
    assert "hf_deleted-value" not in str(api.events(job_id))
