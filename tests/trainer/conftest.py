"""A way to run `python -m trainer` as a real process (or one forked from a zygote that did
the imports) and read what it printed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from apps.jobs.telemetry.metrics import ParsedMetric, parse_metric_line
from tests.trainer.zygote import ForkedTrainer, Zygote

REPO = Path(__file__).resolve().parents[2]
WAIT_S = 300


# `tiny_model` and `demo_data` are session fixtures in tests/conftest.py, shared with the
# integration and browser tests.


@dataclass
class Finished:
    returncode: int
    lines: list[str]  # stdout, without newlines
    stderr: str
    checkpoint_dir: Path

    def events(self, kind: str) -> list[dict]:
        """The JSON lines of `type` `kind`, in order."""
        found = []
        for line in self.lines:
            if line.startswith("{"):
                data = json.loads(line)
                if data.get("type") == kind:
                    found.append(data)
        return found

    def points(self) -> list[ParsedMetric]:
        """What the control plane's parser makes of the output, line by line."""
        return [point for line in self.lines if (point := parse_metric_line(line)) is not None]

    def losses(self) -> dict[int, float]:
        return {point.step: point.loss for point in self.points()}


@dataclass
class Running:
    """A trainer process whose stdout is read as it is written, by a thread, so a test can act
    on a line (send a signal) and several runs can go on at once without filling a pipe."""

    process: subprocess.Popen | ForkedTrainer
    checkpoint_dir: Path
    on_line: Callable[[Running, str], None] | None = None
    lines: list[str] = field(default_factory=list)
    stderr: str = ""

    def __post_init__(self) -> None:
        self._threads = [
            threading.Thread(target=self._read_stdout, daemon=True),
            threading.Thread(target=self._read_stderr, daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def _read_stdout(self) -> None:
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))
            if self.on_line is not None:
                self.on_line(self, line)

    def _read_stderr(self) -> None:
        self.stderr = self.process.stderr.read()

    def wait(self) -> Finished:
        try:
            returncode = self.process.wait(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise
        for thread in self._threads:
            thread.join(timeout=10)
        return Finished(returncode, self.lines, self.stderr, self.checkpoint_dir)


# What the trainer's imports read: the same for every run (a zygote's children share them).
IMPORT_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    # Several runs share the two cores; one thread each keeps them from fighting.
    "OMP_NUM_THREADS": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


def start_trainer(
    config: dict,
    checkpoint_dir: Path,
    *,
    resume_from: Path | None = None,
    on_line: Callable[[Running, str], None] | None = None,
    zygote: Zygote | None = None,
    env: dict[str, str] | None = None,
) -> Running:
    """`python -m trainer --config-json ...` as the runner starts it: TRAINYARD_CHECKPOINT_DIR
    an existing absolute directory, TRAINYARD_RESUME_FROM empty or a checkpoint, and `env`
    on top (the job's own variables). With `zygote`, forked from it with the imports done
    (tests/trainer/zygote.py)."""
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "TRAINYARD_CHECKPOINT_DIR": str(checkpoint_dir),
        "TRAINYARD_RESUME_FROM": str(resume_from) if resume_from else "",
        **IMPORT_ENV,
        **(env or {}),
    }
    args = ["trainer", "--config-json", json.dumps(config)]
    if zygote is not None:
        return Running(zygote.spawn(args[1:], env, REPO), checkpoint_dir, on_line)
    process = subprocess.Popen(
        [sys.executable, "-m", *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return Running(process, checkpoint_dir, on_line)


@pytest.fixture(scope="module")
def trainer_zygote(tmp_path_factory):
    """One zygote for a module's trainer runs: the imports once instead of once per run."""
    zygote = Zygote(tmp_path_factory.mktemp("zygote"), {**os.environ, **IMPORT_ENV})
    yield zygote
    zygote.stop()


def run_trainer(config: dict, checkpoint_dir: Path, **kwargs) -> Finished:
    return start_trainer(config, checkpoint_dir, **kwargs).wait()
