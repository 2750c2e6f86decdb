"""Code with a job, through the whole system (web, worker, beat, runner): a project uploaded
as an archive (`POST /api/v1/compute/workdirs`) plus inline `container.files` is in the
workload's working directory when it starts, on the host runtime and in a podman container,
with no host path anywhere in the request; a job whose archive cannot be unpacked fails
`workdir_invalid`."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile

import pytest

from apps.jobs.models import LogLine
from apps.providers.models import Provider
from tests.compute_api import TERMINAL, ComputeApi
from tests.integration.test_body_limits import _post_headers_only

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

DATA_BYTES = 1_200_000  # random, so the tar.gz stays about 1.2 MB
TRAIN = """\
import hashlib, json, os, sys
from model.net import describe

config = json.load(open("config.json"))
data = open("data/corpus.bin", "rb").read()
print("cwd", os.getcwd())
print("data", len(data), hashlib.sha256(data).hexdigest())
print("model", describe())
print("config", config["steps"], open("notes/readme.txt").read().strip())
print("python", sys.version_info[0])
"""


def _project() -> tuple[bytes, str]:
    """A small Python project with its data, as a tar.gz; and the data's digest."""
    data = os.urandom(DATA_BYTES)
    members = {
        "proj/train.py": TRAIN.encode(),
        "proj/model/__init__.py": b"",
        "proj/model/net.py": b"def describe():\n    return 'a tiny net'\n",
        "proj/data/corpus.bin": data,
    }
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, content in members.items():
            info = tarfile.TarInfo(name.removeprefix("proj/"))
            info.size, info.mode = len(content), 0o644
            archive.addfile(info, io.BytesIO(content))
    return buffer.getvalue(), hashlib.sha256(data).hexdigest()


def _upload(api: ComputeApi, body: bytes) -> dict:
    response = api.session.post(
        f"{api.base}/api/v1/compute/workdirs",
        data=body,
        headers={"Content-Type": "application/gzip"},
        timeout=30,
    )
    assert response.status_code == 201, response.text
    return response.json()


def _submit(api: ComputeApi, *, image: str, workdir: str, files: dict) -> dict:
    body = {
        "name": "code",
        "compute": {"accelerator": "cpu", "gpu_count": 1, "ephemeral_disk_gb": 1},
        "container": {
            "image": image,
            "command": ["python3", "train.py"],
            "workdir": workdir,
            "files": files,
        },
    }
    response = api.session.post(
        f"{api.base}/api/v1/compute/jobs",
        json=body,
        headers={"Idempotency-Key": os.urandom(8).hex()},
        timeout=10,
    )
    assert response.status_code == 201, response.text
    assert response.json()["container"]["workdir"] == workdir
    return response.json()


def _lines(job_id: str, source: str) -> list[str]:
    return list(
        LogLine.objects.filter(job__public_id=job_id, source=source)
        .order_by("attempt", "seq", "id")
        .values_list("message", flat=True)
    )


FILES = {"config.json": json.dumps({"steps": 7}), "notes/readme.txt": "inline notes\n"}


def _runs_with_its_code(api: ComputeApi, image: str) -> list[str]:
    body, data_sha = _project()
    assert 1_150_000 < len(body) < 1_300_000
    archive = _upload(api, body)
    assert archive["sha256"] == hashlib.sha256(body).hexdigest()

    job = _submit(api, image=image, workdir=archive["id"], files=FILES)
    done = api.wait_state(job["id"], TERMINAL, timeout=120)

    user = _lines(job["id"], "user")
    assert (done["state"], done["exit_code"]) == ("succeeded", 0), user + _lines(
        job["id"], "system"
    )
    assert user[1:] == [
        f"data {DATA_BYTES} {data_sha}",
        "model a tiny net",
        "config 7 inline notes",
        "python 3",
    ]
    system = _lines(job["id"], "system")
    assert any(line.startswith(f"working directory: unpacked {archive['id']}") for line in system)
    return user


def test_a_job_runs_with_its_uploaded_code_and_inline_files_on_the_host(api):
    user = _runs_with_its_code(api, "local")
    assert user[0].startswith("cwd /") and user[0].endswith("/work")


@pytest.fixture
def podman(live_stack, podman_image) -> str:
    """The local provider on podman for this test (the worker reads it per launch)."""
    Provider.objects.filter(name="local").update(config={"runtime": "podman"})
    yield podman_image
    Provider.objects.filter(name="local").update(config={})


def test_a_container_job_runs_with_its_uploaded_code_and_inline_files(api, podman):
    user = _runs_with_its_code(api, podman)
    assert user[0] == "cwd /work/work"  # the container's view: no host path


def test_a_job_whose_code_cannot_be_put_in_place_fails_workdir_invalid(api):
    body, _ = _project()
    archive = _upload(api, body)
    # A file of the archive's own name among the inline files' parents: the archive's
    # `data/corpus.bin` is a file, so `data/corpus.bin/x` cannot be written.
    job = _submit(api, image="local", workdir=archive["id"], files={"data/corpus.bin/x.txt": "x"})
    done = api.wait_state(job["id"], TERMINAL, timeout=90)
    assert (done["state"], done["reason"]) == ("failed", "workdir_invalid")
    assert _lines(job["id"], "user") == []
    assert any(
        line.startswith("could not prepare the working directory")
        for line in _lines(job["id"], "system")
    )


def test_an_archive_larger_than_request_max_bytes_passes_the_body_guard(api, live_stack):
    big = io.BytesIO()
    with tarfile.open(fileobj=big, mode="w:gz") as archive:
        content = os.urandom(6 * 1024 * 1024)  # over REQUEST_MAX_BYTES (4 MiB)
        info = tarfile.TarInfo("weights.bin")
        info.size = len(content)
        archive.addfile(info, io.BytesIO(content))
    assert _upload(api, big.getvalue())["size_bytes"] == len(big.getvalue())
    # Without a valid key the general limit holds, before a byte is read.
    refused = _post_headers_only(
        live_stack.port,
        "/api/v1/compute/workdirs",
        len(big.getvalue()),
        {"Authorization": "Bearer ty_bogus_key", "Content-Type": "application/gzip"},
    )
    assert refused.startswith(b"HTTP/1.1 413"), refused[:200]
