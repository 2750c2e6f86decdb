"""The job's code on the runner's side (`runner.workdir`): the archive is downloaded, checked
against its size and digest, unpacked safely and the inline files written into the
working directory before the workload starts; when any of it fails the workload does not
start and the exit reported is 65. End to end: `python -m runner` against
tests/runner/peer.py."""

from __future__ import annotations

import hashlib
import os
import time

import pytest

from runner.client import ControlClient
from runner.workdir import WorkdirError, prepare_workdir, write_files

# ruff: noqa: F811 - test_agent.py's fixtures, imported to be used as fixtures
from tests.runner.test_agent import (  # noqa: F401
    JOB,
    TOKEN,
    _runner_log,
    assert_complete,
    launch,
    plane,
    script,
    spec,
)
from tests.runner.test_archive import make_tar, make_zip

DOWNLOAD = f"/api/v1/runner/jobs/{JOB}/workdirs/wd_abc/download"
PROJECT = [
    ("dir", "pkg"),
    ("file", "pkg/train.py", b"print('training from the archive')\n"),
    ("file", "data/input.txt", b"hello data\n"),
]
READS_THE_CODE = """
python3 pkg/train.py
cat data/input.txt
cat config.json; echo
pwd
"""


def _workdir(body: bytes, fmt: str = "tar.gz", **overrides) -> dict:
    item = {
        "id": "wd_abc",
        "format": fmt,
        "download_url": DOWNLOAD,
        "sha256": hashlib.sha256(body).hexdigest(),
        "size_bytes": len(body),
    }
    item.update(overrides)
    return item


@pytest.mark.parametrize("maker", [make_tar, make_zip])
def test_the_archive_and_files_are_in_the_working_directory_when_the_workload_starts(
    plane, launch, tmp_path, maker
):
    body = maker(tmp_path / "code", PROJECT).read_bytes()
    fmt = "tar.gz" if maker is make_tar else "zip"
    plane.downloads[DOWNLOAD] = body
    plane.download_statuses = [503]  # the control plane is away once; the runner retries
    plane.spec = spec(
        script_b64=script(READS_THE_CODE),
        workdir=_workdir(body, fmt),
        files={"config.json": '{"lr": 0.1}', "data/input.txt": "replaced by files\n"},
    )

    runner = launch(plane)

    assert runner.wait(30) == 0, _runner_log(tmp_path)
    assert_complete(plane)
    work = tmp_path / "attempt" / "work"
    assert plane.messages("user") == [
        "training from the archive",
        "replaced by files",  # files are written after the archive
        '{"lr": 0.1}',
        str(work),
    ]
    system = plane.messages("system")
    assert system[0] == "fetched spec"
    assert system[1].startswith("working directory: unpacked wd_abc (3 members, ")
    assert system[1].endswith("wrote 2 file(s): config.json, data/input.txt")
    assert plane.exits[0]["exit_code"] == 0
    assert not (tmp_path / "attempt" / "workdir.archive.part").exists()
    assert not (tmp_path / "attempt" / "workdir.unpack").exists()


@pytest.mark.parametrize(
    ("case", "why"),
    [
        ("tampered", "hashes to"),
        ("missing", "HTTP 404"),
        ("escaping", "'..' is not allowed"),
        ("short", "bytes, not"),
    ],
)
def test_a_workload_whose_code_cannot_be_put_in_place_does_not_start(
    plane, launch, tmp_path, case, why
):
    body = make_tar(tmp_path / "code.tgz", PROJECT).read_bytes()
    announced = _workdir(body)
    if case == "tampered":
        plane.downloads[DOWNLOAD] = body[:-1] + bytes([body[-1] ^ 1])
    elif case == "escaping":
        body = make_tar(tmp_path / "bad.tgz", [("file", "../escape.txt", b"x")]).read_bytes()
        plane.downloads[DOWNLOAD] = body
        announced = _workdir(body)
    elif case == "short":
        plane.downloads[DOWNLOAD] = body
        announced = _workdir(body, size_bytes=len(body) + 1)
    plane.spec = spec(script_b64=script("echo started"), workdir=announced)

    runner = launch(plane)

    assert runner.wait(30) == 0, _runner_log(tmp_path)
    assert_complete(plane)
    assert plane.messages("user") == []
    assert plane.started == []
    system = plane.messages("system")
    assert system[1].startswith("could not prepare the working directory: archive wd_abc: ")
    assert why in system[1] and system[1].endswith("; not starting the workload")
    assert system[-1] == "workload exited with code 65"
    assert plane.exits[0]["exit_code"] == 65
    assert not (tmp_path / "escape.txt").exists()
    assert not (tmp_path / "attempt" / "escape.txt").exists()


def test_an_older_spec_without_workdir_runs_as_before(plane, launch, tmp_path):
    plane.spec = spec(script_b64=script("ls"))
    runner = launch(plane)
    assert runner.wait(30) == 0, _runner_log(tmp_path)
    assert plane.messages("user") == ["checkpoints"]
    assert not any(line.startswith("working directory") for line in plane.messages("system"))


def test_a_relaunched_runner_replaces_what_the_first_one_unpacked(plane, tmp_path):
    body = make_tar(tmp_path / "code.tgz", PROJECT).read_bytes()
    plane.downloads[DOWNLOAD] = body
    work = tmp_path / "attempt" / "work"
    (work / "pkg").mkdir(parents=True)
    (work / "pkg" / "stale.py").write_text("left over")
    (work / "data").symlink_to("/")  # left by a workload: replaced, never followed
    summary = prepare_workdir(
        ControlClient(plane.url, JOB, TOKEN),
        _workdir(body),
        None,
        workdir=tmp_path / "attempt",
        work=work,
        deadline=time.monotonic() + 5,
        should_stop=lambda: False,
        sleep=time.sleep,
    )
    assert summary.startswith("unpacked wd_abc (3 members")
    assert sorted(os.listdir(work / "pkg")) == ["train.py"]
    assert not (work / "data").is_symlink()
    assert (work / "data" / "input.txt").read_text() == "hello data\n"


@pytest.mark.parametrize("path", ["../x.py", "/etc/x", "a/../../x", "", "."])
def test_inline_files_outside_the_working_directory_are_refused(tmp_path, path):
    with pytest.raises(WorkdirError):
        write_files({path: "x"}, tmp_path / "work")
    assert not (tmp_path / "x.py").exists()


def test_inline_files_are_never_written_through_a_link(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "outside").mkdir()
    (work / "link").symlink_to(tmp_path / "outside")
    with pytest.raises(WorkdirError, match="is a link"):
        write_files({"link/x.py": "x"}, work)
    assert list((tmp_path / "outside").iterdir()) == []
    (work / "file-link").symlink_to(tmp_path / "outside" / "target")
    assert write_files({"file-link": "replaced"}, work) == ["file-link"]
    assert not (work / "file-link").is_symlink()
    assert not (tmp_path / "outside" / "target").exists()
