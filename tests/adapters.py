"""Two small LoRA adapters of the tiny model, trained by the real trainer, for the tests that
serve adapters (`tiny_adapters` in tests/conftest.py).

Run A learns the ChatML toy dataset and run B the plain-text one, with their own seeds, ten
steps each at a learning rate of 0.01: enough that, for the prompt `PROMPT`, the greedy
completions of the base, A and B are three different texts (`tests/engine` checks it). The two
runs go at once with one thread each; on two cores both take about 6 s together, most of it
importing torch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROMPT = "Reverse: a b c\nAnswer:"  # the base, A and B complete it differently
STEPS, SAVE_STEPS = 10, 5
RUNS = {
    # name: (dataset format, seed)
    "a": ("chatml", 1),
    "b": ("text", 2),
}
TIMEOUT_S = 300


def train_adapters(out_dir: Path, tiny_model: Path, demo_data: dict[str, Path]) -> dict[str, Path]:
    """Train runs A and B into `out_dir`; `{"a": ..., "b": ...}` are their final adapters and
    `"a_checkpoint"` is run A's checkpoint at step SAVE_STEPS (also a loadable adapter)."""
    started = {}
    for name, (dataset_format, seed) in RUNS.items():
        run_dir = out_dir / name
        run_dir.mkdir(parents=True, exist_ok=True)
        config = {
            "model": str(tiny_model),
            "dataset": str(demo_data[dataset_format]),
            "dataset_format": dataset_format,
            "learning_rate": 0.01,
            "max_length": 64,
            "batch_size": 4,
            "max_samples": 32,
            "max_steps": STEPS,
            "save_steps": SAVE_STEPS,
            "seed": seed,
            "output_dir": str(run_dir),
        }
        started[name] = subprocess.Popen(
            [sys.executable, "-m", "trainer", "--config-json", json.dumps(config)],
            cwd=REPO,
            env={
                **os.environ,
                "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1",
                "OMP_NUM_THREADS": "1",  # the two runs share the cores
                "TOKENIZERS_PARALLELISM": "false",
            },
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    lines = {}
    for name, process in started.items():
        stdout, stderr = process.communicate(timeout=TIMEOUT_S)
        assert process.returncode == 0, f"training run {name} failed:\n{stdout}\n{stderr}"
        lines[name] = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]

    def path_of(name: str, kind: str, step: int | None = None) -> Path:
        found = [
            line["path"]
            for line in lines[name]
            if line.get("type") == kind and (step is None or line.get("step") == step)
        ]
        assert found, f"run {name} printed no {kind} line (step {step})"
        return Path(found[-1])

    return {
        "a": path_of("a", "adapter"),
        "b": path_of("b", "adapter"),
        "a_checkpoint": path_of("a", "checkpoint", SAVE_STEPS),
    }
