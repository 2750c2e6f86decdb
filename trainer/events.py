"""The JSON lines the trainer prints to stdout, one object per line, flushed at once.

The control plane parses every log line with `apps.jobs.telemetry.metrics.parse_metric_line`:
a line whose `type` is `metrics` becomes a metric point; a line with any other `type` is
ignored there and is for whoever reads the log (the checkpoint and adapter paths).

- `train_start`: `step` (0, or the step resumed from), `max_steps`, `train_rows`,
  `held_out_rows`, `resumed_from` (a path or null); as training begins.
- `metrics`: `step`, `loss`, `learning_rate`, `epoch`, `grad_norm`, `tokens_per_s`; every
  `logging_steps`.
- `checkpoint`: `step`, `path` (absolute); once the checkpoint is completely written. The
  runner uploads the directory (`runner.artifacts`).
- `stopped`: `step` (null before training began), `signal`, `checkpoint` (the path of this
  run's last checkpoint, or null); a signal stopped training early.
- `grading`: `eval_loss_before`, `eval_loss_after`, `passed`, `reason` (null when passed).
  `apps.jobs.telemetry.ingestion` keeps it as the job's `grading` event.
- `adapter`: `path`; the final adapter passed grading and is written. The runner uploads it.
- `adapter_rejected`: `path`; grading failed, and the adapter is kept there for a person to
  inspect. The runner does not upload it.
- `tracker_run`: `tracker` (`wandb` or `mlflow`), `run_id`, `url` (null where the tracker
  has no page for it); a tracker run was opened (`trainer.trackers`). Kept as the job's
  `tracker_run` event, which the job page links to.

`loss` and the eval losses may be NaN (written as the bare `NaN`, which Python's json reads);
every other number is finite or left out.
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any

from runner.protocol import LINE_METRICS


def emit(kind: str, **fields: Any) -> None:
    print(json.dumps({"type": kind, **fields}), flush=True)


def emit_metrics(*, step: int, loss: float, **numbers: float | None) -> None:
    """A metrics line; `numbers` that are None or not finite are left out."""
    finite = {
        name: value for name, value in numbers.items() if value is not None and math.isfinite(value)
    }
    emit(LINE_METRICS, step=step, loss=loss, **finite)


def say(message: str) -> None:
    """A line for people, on stdout between the JSON lines."""
    print(f"trainer: {message}", flush=True)


def warn(message: str) -> None:
    """Something the run does without (a tracker), on stderr; training goes on."""
    print(f"trainer: warning: {message}", file=sys.stderr, flush=True)


def fail(message: str) -> None:
    print(f"trainer: {message}", file=sys.stderr, flush=True)
