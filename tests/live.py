"""Helpers for tests that start real processes: free ports, waiting on a condition (never a
blind sleep), and process groups that are always torn down."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def read_or_empty(path: str) -> bytes:
    """A file's bytes, or b"" when it cannot be read (a /proc entry of a process gone)."""
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return b""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until(
    predicate: Callable[[], object],
    timeout: float = 20.0,
    interval: float = 0.05,
    what: str = "condition",
) -> object:
    """Poll `predicate` until it returns something truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def base_env(**overrides: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env.update(overrides)
    return env


def manage(*args: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, f"manage.py {' '.join(args)}:\n{result.stdout}{result.stderr}"
    return result


@contextmanager
def process_group(
    args: list[str] | str, *, env: dict[str, str], log: Path, shell: bool = False
) -> Iterator[subprocess.Popen]:
    """Run a command in its own process group; on exit SIGTERM the group, then SIGKILL."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            args,
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            shell=shell,
        )
    try:
        yield proc
    finally:
        _stop_group(proc)


def _stop_group(proc: subprocess.Popen, grace: float = 10.0) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=grace)


def with_demo_model(var_dir: Path, tiny_model: Path) -> None:
    """Put the tiny model where `seed_demo` keeps the demo model (a stack's second start
    finds it so), so a test's `make run` or `seed_demo` publishes it instead of building it
    again (torch's import and a tokenizer's training: about 5 s of CPU)."""
    import shutil

    target = var_dir / "demo" / "tiny-llama"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(tiny_model, target)
