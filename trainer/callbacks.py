"""`TrainerCallback`s that print the trainer's JSON lines and act on stop requests.

`Trainer`'s own `PrinterCallback` is removed (see `trainer.train`): it prints the same logs as
Python dicts, which the control plane's parser also reads, so every point would count twice.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable

from transformers import TrainerCallback

from runner.protocol import LINE_CHECKPOINT
from trainer.events import emit, emit_metrics, fail
from trainer.stopping import StopRequest


class TrainStartCallback(TrainerCallback):
    """A `train_start` line: where training starts (0, or the resumed step) and ends."""

    def __init__(self, train_rows: int, held_out_rows: int, resumed_from: str | None) -> None:
        self.fields = {
            "train_rows": train_rows,
            "held_out_rows": held_out_rows,
            "resumed_from": resumed_from,
        }

    def on_train_begin(self, args, state, control, **kwargs):
        emit("train_start", step=state.global_step, max_steps=state.max_steps, **self.fields)


class MetricsCallback(TrainerCallback):
    """One `metrics` line per training log. A loss that is not finite stops training at that
    step, unsaved: a diverged run does not recover, and grading rejects it. `report` gets the
    same numbers for the run's trackers (`trainer.trackers.Reporting.log`)."""

    def __init__(self, report: Callable[..., None] | None = None) -> None:
        self.report = report
        self.first_loss: float | None = None
        self.bad_loss: float | None = None  # the first NaN or infinite loss
        self._time = 0.0
        self._tokens = 0

    def on_train_begin(self, args, state, control, **kwargs):
        self._time = time.monotonic()
        self._tokens = state.num_input_tokens_seen

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or "loss" not in logs:  # eval and end-of-training summaries
            return
        now = time.monotonic()
        elapsed, tokens = now - self._time, state.num_input_tokens_seen - self._tokens
        self._time, self._tokens = now, state.num_input_tokens_seen
        loss = float(logs["loss"])
        numbers = {
            "learning_rate": _number(logs.get("learning_rate")),
            "epoch": _number(logs.get("epoch")),
            "grad_norm": _number(logs.get("grad_norm")),
            "tokens_per_s": tokens / elapsed if elapsed > 0 and tokens > 0 else None,
        }
        emit_metrics(step=state.global_step, loss=loss, **numbers)
        if self.report is not None:
            self.report(
                {"train/loss": loss, **{f"train/{name}": v for name, v in numbers.items()}},
                step=state.global_step,
            )
        if self.first_loss is None:
            self.first_loss = loss
        if not math.isfinite(loss) and self.bad_loss is None:
            self.bad_loss = loss
            fail(f"training loss is {loss} at step {state.global_step}; stopping")
            control.should_training_stop = True
            # No checkpoint of broken weights: a resumed attempt would start from it.
            control.should_save = False


class CheckpointCallback(TrainerCallback):
    """A `checkpoint` line once `Trainer` has written a checkpoint completely."""

    def __init__(self) -> None:
        self.last_path: str | None = None

    def on_save(self, args, state, control, **kwargs):
        path = os.path.abspath(os.path.join(args.output_dir, f"checkpoint-{state.global_step}"))
        self.last_path = path
        emit(LINE_CHECKPOINT, step=state.global_step, path=path)


class StopCallback(TrainerCallback):
    """Turns a signal's stop request into a checkpoint at the step that just ended."""

    def __init__(self, stop: StopRequest) -> None:
        self.stop = stop

    def on_step_end(self, args, state, control, **kwargs):
        if self.stop.requested and self.stop.start_saving():
            control.should_save = True
            control.should_training_stop = True


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)
