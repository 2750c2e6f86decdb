"""The runner as one file: the zipapp runs the runner and its host-side tools, its name
follows its content, installing it over a transport replaces the file whole, and it never
runs unless its sha256 is the control plane's."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
import zipfile
from io import BytesIO

import pytest

from apps.providers.backends.bundle import (
    BUNDLE_MISMATCH,
    bundle_name,
    install_bundle,
    runner_bundle,
    verified_argv,
)
from apps.providers.backends.transport import LocalTransport
from runner import protocol


def test_the_bundle_holds_the_runner_and_is_the_same_every_build():
    data = runner_bundle()
    assert data.startswith(b"#!/usr/bin/env python3\n")
    names = zipfile.ZipFile(BytesIO(data)).namelist()
    assert "__main__.py" in names and "runner/agent.py" in names and "runner/protocol.py" in names
    runner_bundle.cache_clear()
    assert runner_bundle() == data  # deterministic: the digest names this code
    assert bundle_name().startswith("runner-") and bundle_name().endswith(".pyz")


def test_the_bundle_runs_the_runner_which_refuses_an_empty_environment(tmp_path):
    path = tmp_path / bundle_name()
    path.write_bytes(runner_bundle())
    run = subprocess.run(
        [sys.executable, str(path)], capture_output=True, text=True, env={}, timeout=30
    )
    assert run.returncode == protocol.EXIT_CONFIG
    assert protocol.ENV_CONTROL_URL in run.stderr + run.stdout


def test_the_bundle_runs_the_host_relay(tmp_path):
    upstream = "http://127.0.0.1:9"  # nothing listens: the relay starts all the same
    path = tmp_path / bundle_name()
    path.write_bytes(runner_bundle())
    relay = subprocess.Popen(
        [sys.executable, str(path), "relay", *("--listen", "127.0.0.1:0", "--upstream"), upstream],
        stdout=subprocess.PIPE,
        env={},
    )
    try:
        listening = json.loads(relay.stdout.readline())["listening"]
        with urllib.request.urlopen(f"{listening}/status", timeout=10) as answer:
            counts = json.loads(answer.read())
    finally:
        relay.kill()
        relay.wait(timeout=10)
        relay.stdout.close()
    assert listening.startswith("http://127.0.0.1:")
    assert counts == {"bundles": 0, "relayed": 0, "passed_through": 0}


def test_install_replaces_a_tampered_bundle_atomically_in_a_directory_others_cannot_write(
    tmp_path,
):
    transport = LocalTransport()
    target = tmp_path / "far" / "side"
    path = install_bundle(transport, str(target))
    assert path == str(target / bundle_name())
    assert (target / bundle_name()).read_bytes() == runner_bundle()
    assert target.stat().st_mode & 0o777 == 0o755
    assert (target / bundle_name()).stat().st_mode & 0o777 == 0o644
    (target / bundle_name()).write_bytes(b"print('not the runner')\n")
    assert install_bundle(transport, str(target)) == path
    assert (target / bundle_name()).read_bytes() == runner_bundle()
    assert [p.name for p in target.iterdir()] == [bundle_name()]  # no temporary file left


def test_a_bundle_runs_only_when_its_sha256_is_the_control_planes(tmp_path):
    path = tmp_path / bundle_name()
    path.write_bytes(runner_bundle())
    ran = tmp_path / "ran"
    done = subprocess.run(verified_argv(sys.executable, str(path), "hostctl", "capacity"),
                          capture_output=True)  # fmt: skip
    assert (done.returncode, json.loads(done.stdout)) == (0, {"gpus": 0})
    # A workload of the same user wrote over it: what it wrote never runs.
    path.write_text(f"open({str(ran)!r}, 'w').write('ran')\n")
    done = subprocess.run(verified_argv(sys.executable, str(path), "hostctl", "capacity"),
                          capture_output=True)  # fmt: skip
    assert done.returncode == BUNDLE_MISMATCH
    assert b"sha256" in done.stderr and not ran.exists()
    path.unlink()
    missing = subprocess.run(verified_argv(sys.executable, str(path)), capture_output=True)
    assert missing.returncode == BUNDLE_MISMATCH


def test_install_into_a_place_it_cannot_write_names_it(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(Exception, match="could not install the runner"):
        install_bundle(LocalTransport(), str(blocker / "dir"))
