"""runner.sftp_server against OpenSSH's own `sftp` and `scp` clients: `sftp -D` starts the
server as a local subprocess (no ssh involved), and `scp -S` runs it in place of ssh."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SERVER = f"{sys.executable} -m runner.sftp_server"

pytestmark = pytest.mark.skipif(shutil.which("sftp") is None, reason="no OpenSSH sftp client")


def sftp(cwd: Path, *commands: str) -> subprocess.CompletedProcess:
    """Run `commands` as an sftp batch against the server (its working directory `cwd`)."""
    batch = cwd / "batch.txt"
    batch.write_text("\n".join(commands) + "\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        ["sftp", "-b", str(batch), "-D", SERVER],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_put_and_get_carry_a_binary_file_byte_for_byte(tmp_path):
    data = os.urandom(3 * 1024 * 1024 + 17)
    (tmp_path / "model.bin").write_bytes(data)
    done = sftp(tmp_path, "put model.bin uploaded.bin", "get uploaded.bin fetched.bin")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "uploaded.bin").read_bytes() == data
    assert (tmp_path / "fetched.bin").read_bytes() == data


def test_listing_making_renaming_chmod_and_removing(tmp_path):
    (tmp_path / "a.txt").write_text("hello\n")
    done = sftp(
        tmp_path,
        "mkdir runs",
        "rename a.txt runs/b.txt",
        "chmod 600 runs/b.txt",
        "ls -l runs",
        "ln -s b.txt runs/link",
        "ls runs",
        "rm runs/link",
        "rm runs/b.txt",
        "rmdir runs",
        "ls",
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    listing = lines[lines.index("sftp> ls -l runs") + 1]
    assert listing.startswith("-rw-------") and listing.endswith("b.txt")
    assert "6" in listing.split()  # the size
    assert "runs/link" in done.stdout
    assert not (tmp_path / "runs").exists()
    assert not (tmp_path / "a.txt").exists()


def test_chmod_and_times_reach_the_file(tmp_path):
    (tmp_path / "src").write_text("x")
    os.utime(tmp_path / "src", (1_000_000_000, 1_000_000_000))
    done = sftp(tmp_path, "put -p src copy", "chmod 640 copy")
    assert done.returncode == 0, done.stderr
    copied = os.stat(tmp_path / "copy")
    assert stat.S_IMODE(copied.st_mode) == 0o640
    assert int(copied.st_mtime) == 1_000_000_000


def test_a_missing_file_is_an_error_that_names_it(tmp_path):
    done = sftp(tmp_path, "get nothere.bin")
    assert done.returncode != 0
    assert "nothere.bin" in done.stderr and "not found" in done.stderr
    done = sftp(tmp_path, "rmdir nothere")
    assert done.returncode != 0
    assert "No such file" in done.stderr


def test_df_uses_statvfs(tmp_path):
    done = sftp(tmp_path, "df -h")
    assert done.returncode == 0, done.stderr
    assert "Size" in done.stdout


@pytest.mark.skipif(shutil.which("scp") is None, reason="no OpenSSH scp client")
def test_scp_over_sftp_copies_both_ways(tmp_path):
    fake_ssh = tmp_path / "ssh"  # scp runs this instead of ssh: the server on stdin/stdout
    fake_ssh.write_text(f"#!/bin/sh\nexec {SERVER}\n")
    fake_ssh.chmod(0o755)
    data = os.urandom(1024 * 1024)
    (tmp_path / "src.bin").write_bytes(data)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for args in (["src.bin", "job:up.bin"], ["job:up.bin", "down.bin"]):
        done = subprocess.run(
            ["scp", "-q", "-s", "-S", str(fake_ssh), *args],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
    assert (tmp_path / "down.bin").read_bytes() == data


def test_a_runner_run_from_its_bundle_starts_the_bundles_sftp_server(tmp_path):
    from apps.providers.backends.bundle import bundle_name, runner_bundle

    bundle = tmp_path / bundle_name()
    bundle.write_bytes(runner_bundle())
    ask = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); from runner import shell_spawn; "
        "shell_spawn.SYSTEM_SFTP_SERVERS = (); print(json.dumps(shell_spawn.sftp_argv({})[1]))"
    )
    found = subprocess.run(
        [sys.executable, "-I", "-c", ask, str(bundle)], capture_output=True, text=True, timeout=30
    )
    argv = json.loads(found.stdout)
    assert argv == [sys.executable, str(bundle), "sftp_server"]
    (tmp_path / "data.bin").write_bytes(b"\x00\x01" * 1000)
    batch = tmp_path / "batch.txt"
    batch.write_text("put data.bin copy.bin\nls\n")
    done = subprocess.run(
        ["sftp", "-b", str(batch), "-D", " ".join(argv)],
        cwd=tmp_path,
        env={"PATH": os.environ["PATH"]},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "copy.bin").read_bytes() == b"\x00\x01" * 1000
