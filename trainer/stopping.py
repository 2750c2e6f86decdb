"""SIGUSR1 and SIGTERM: checkpoint at the current step, then exit.

The runner sends SIGUSR1 for the control plane's `checkpoint_and_exit` order and SIGTERM for
`terminate` (and when it is itself told to stop); it kills the workload `terminate_grace_s`
later. The handlers only note the signal; `trainer.callbacks.StopCallback` sees the note at
the end of the current optimizer step and asks `Trainer` to save a checkpoint and stop.

- setup (loading, the first eval): SIGUSR1 exits 0, as no step was trained and there is
  nothing to save; SIGTERM exits 143.
- training: SIGUSR1 saves a checkpoint at the current step and exits 0. SIGTERM does the
  same, and exits 143, if the step ends within `SIGTERM_SAVE_WITHIN_S`; else it exits 143
  without saving.
- finishing (the final eval, the adapter): SIGUSR1 is ignored, as the final checkpoint is
  written; SIGTERM exits 143.

A SIGTERM stop exits 143 even when it saved a checkpoint: the runner also forwards a SIGTERM
the runner itself received (a host shutting down), and the control plane marks a running job
whose workload exits 0 as succeeded; 143 says "terminated", and the checkpoint line tells where
to resume. The handlers write with `os.write`, as printing from a signal handler could
re-enter a `print` the main thread is in the middle of.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading

from runner.protocol import EXIT_SIGTERM

SIGTERM_SAVE_WITHIN_S = 1.0


class StopRequest:
    """Shared between the signal handlers (main thread), a watchdog thread and the callbacks."""

    def __init__(self, *, save_within_s: float = SIGTERM_SAVE_WITHIN_S) -> None:
        self.phase = "setup"  # setup | training | finishing
        self.signal_name: str | None = None  # the signal that asked training to stop
        self.save_within_s = save_within_s
        self._lock = threading.Lock()
        self._save = "not_started"  # not_started | saving | abandoned
        self._watchdog: threading.Timer | None = None

    @property
    def requested(self) -> bool:
        return self.signal_name is not None

    @property
    def exit_code(self) -> int:
        return EXIT_SIGTERM if self.signal_name == "SIGTERM" else 0

    def install(self) -> None:
        signal.signal(signal.SIGUSR1, self._on_signal)
        signal.signal(signal.SIGTERM, self._on_signal)

    def start_saving(self) -> bool:
        """Called at a step boundary once a stop was requested: from here on the watchdog lets
        the checkpoint finish (the runner's SIGKILL still bounds it). False when the watchdog
        has already begun to exit."""
        with self._lock:
            if self._save == "abandoned":
                return False
            self._save = "saving"
            if self._watchdog is not None:
                self._watchdog.cancel()
            return True

    def _on_signal(self, signum: int, _frame: object) -> None:
        name = signal.Signals(signum).name
        if self.phase == "setup":
            if signum == signal.SIGUSR1:
                _write(
                    1,
                    json.dumps(
                        {"type": "stopped", "step": None, "signal": name, "checkpoint": None}
                    ),
                )
                _write(2, f"trainer: {name} before training began: nothing to checkpoint")
                os._exit(0)
            _write(2, f"trainer: {name} before training began: exiting")
            os._exit(EXIT_SIGTERM)
        if self.phase == "finishing":
            if signum == signal.SIGUSR1:
                _write(2, f"trainer: {name} after training: finishing (final checkpoint written)")
                return
            _write(2, f"trainer: {name} while finishing: exiting")
            os._exit(EXIT_SIGTERM)
        if signum == signal.SIGTERM or self.signal_name is None:
            self.signal_name = name
        _write(2, f"trainer: {name}: checkpointing at the end of the current step")
        if signum == signal.SIGTERM:
            with self._lock:
                if self._save == "not_started" and self._watchdog is None:
                    self._watchdog = threading.Timer(self.save_within_s, self._give_up)
                    self._watchdog.daemon = True
                    self._watchdog.start()

    def _give_up(self) -> None:
        with self._lock:
            if self._save == "saving":
                return
            self._save = "abandoned"
        _write(
            2,
            f"trainer: SIGTERM: the step did not end within {self.save_within_s:g}s; "
            "exiting without a checkpoint",
        )
        os._exit(EXIT_SIGTERM)


def _write(fd: int, line: str) -> None:
    with contextlib.suppress(OSError):
        os.write(fd, (line + "\n").encode())
