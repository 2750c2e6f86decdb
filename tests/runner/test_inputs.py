"""Inputs on the runner's side (a fine-tune's uploaded dataset): downloaded into the
workload's working directory before it starts, checked against their digest; a workload
whose input cannot be had does not start. End to end: `python -m runner` against
tests/runner/peer.py."""

from __future__ import annotations

import hashlib
import time

import pytest

from runner.client import ControlClient
from runner.inputs import InputError, fetch_inputs

# test_agent.py's fixtures `launch` and `plane` are imported to be used as fixtures, which
# ruff reads as a redefinition in every test that takes them.
# ruff: noqa: F811
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

DATASET = b'{"instruction": "Say hi", "output": "Hello"}\n' * 50
DOWNLOAD = f"/api/v1/runner/jobs/{JOB}/datasets/ds_abc/download"
PATH = "inputs/ds_abc.jsonl"
READS_THE_INPUT = f"""
wc -c < {PATH}
head -c 44 {PATH}; echo
"""


def _inputs(body: bytes = DATASET, **overrides) -> list[dict]:
    item = {
        "path": PATH,
        "download_url": DOWNLOAD,
        "sha256": hashlib.sha256(body).hexdigest(),
        "size_bytes": len(body),
    }
    item.update(overrides)
    return [item]


def test_an_input_is_in_the_working_directory_when_the_workload_starts(plane, launch, tmp_path):
    plane.downloads[DOWNLOAD] = DATASET
    plane.download_statuses = [503]  # the control plane is away once; the runner retries
    plane.spec = spec(script_b64=script(READS_THE_INPUT), inputs=_inputs())

    runner = launch(plane)

    assert runner.wait(30) == 0, _runner_log(tmp_path)
    assert_complete(plane)
    assert plane.messages("user") == [str(len(DATASET)), DATASET[:44].decode()]
    assert plane.messages("system")[:3] == [
        "fetched spec",
        f"fetched input {PATH}",
        f"starting workload: bash {tmp_path / 'attempt' / 'script.sh'}",
    ]
    assert plane.download_tries == [DOWNLOAD, DOWNLOAD]
    assert plane.exits[0]["exit_code"] == 0
    work = tmp_path / "attempt" / "work"
    assert sorted(p.name for p in (work / "inputs").iterdir()) == ["ds_abc.jsonl"]


@pytest.mark.parametrize(
    ("served", "why"),
    [(DATASET + b"tampered", "hashes to"), (None, "HTTP 404")],
)
def test_a_workload_whose_input_cannot_be_had_does_not_start(plane, launch, tmp_path, served, why):
    if served is not None:
        plane.downloads[DOWNLOAD] = served
    plane.spec = spec(script_b64=script("echo started"), inputs=_inputs())

    runner = launch(plane)

    assert runner.wait(30) == 0, _runner_log(tmp_path)
    assert_complete(plane)
    assert plane.messages("user") == []
    assert plane.started == []
    system = plane.messages("system")
    assert system[1].startswith(f"could not fetch an input: input {PATH}: ")
    assert why in system[1] and system[1].endswith("; not starting the workload")
    assert system[-1] == "workload exited with code 66"
    assert plane.exits[0]["exit_code"] == 66
    assert not (tmp_path / "attempt" / "work" / PATH).exists()
    assert list((tmp_path / "attempt" / "work" / "inputs").iterdir()) == []


def _fetch(plane, inputs, work):
    return fetch_inputs(
        ControlClient(plane.url, JOB, TOKEN),
        inputs,
        work,
        deadline=time.monotonic() + 5,
        should_stop=lambda: False,
        sleep=time.sleep,
    )


@pytest.mark.parametrize("path", ["../escape.jsonl", "/etc/passwd", "inputs/../../x", ""])
def test_an_input_path_outside_the_working_directory_is_refused(plane, tmp_path, path):
    plane.downloads[DOWNLOAD] = DATASET
    with pytest.raises(InputError):
        _fetch(plane, _inputs(path=path), tmp_path / "work")
    assert plane.download_tries == []


def test_a_whole_input_left_by_an_earlier_runner_is_not_downloaded_again(plane, tmp_path):
    plane.downloads[DOWNLOAD] = DATASET
    work = tmp_path / "work"
    assert _fetch(plane, _inputs(), work) == [work / PATH]
    assert _fetch(plane, _inputs(), work) == [work / PATH]
    assert plane.download_tries == [DOWNLOAD]
    assert (work / PATH).read_bytes() == DATASET
