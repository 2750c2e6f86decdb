"""Reporting a run to Weights & Biases and MLflow, when the job's environment asks for it.

A job asks by its environment (the keys through `secret_env`, never plain `env`):

- W&B: `WANDB_API_KEY`, or `WANDB_MODE=offline` (files under `WANDB_DIR`, for a later
  `wandb sync`); `WANDB_PROJECT` (default `trainyard`), `WANDB_ENTITY`, `WANDB_BASE_URL` and
  the rest of wandb's own variables are read by wandb itself. `WANDB_MODE=disabled` turns
  it off.
- MLflow: `MLFLOW_TRACKING_URI`; `MLFLOW_EXPERIMENT_NAME` (default `trainyard`), and
  `MLFLOW_TRACKING_USERNAME`/`_PASSWORD`/`_TOKEN`, which mlflow reads itself.

We use a small reporter of our own rather than transformers' `WandbCallback` and
`MLflowCallback` (`report_to`): those raise when their package is missing or their server
cannot be reached, which would fail a paid training run over a dashboard; they log the whole
`TrainingArguments` and model config; and neither says where its run is. Here every call
into a tracker is guarded: a tracker whose package is missing, whose server is unreachable or
that fails mid-run is dropped with one `trainer: warning:` line on stderr, and training goes
on. The run's address is printed as a `tracker_run` line (`trainer.events`), which the
control plane keeps as the job's `tracker_run` event and links from the job page.

Each attempt of a job is its own tracker run, named `<job id>-attempt-<n>` and grouped (W&B
group, MLflow tag `trainyard.job_id`) by job: a resumed attempt starts again from its
checkpoint's step, which one W&B run would refuse (its steps only go up).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

from runner.protocol import ENV_ATTEMPT, ENV_JOB_ID, LINE_TRACKER_RUN
from trainer.events import emit, warn

DEFAULT_PROJECT = "trainyard"
# An unreachable MLflow server costs its first call this many retries (mlflow's default, 7
# with a backoff factor of 2, waits minutes) before the tracker is dropped; a job may set
# these variables itself.
MLFLOW_HTTP_DEFAULTS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "20",
}
MAX_PARAM_CHARS = 500  # MLflow's limit on a param's value


@dataclass(frozen=True)
class TrackerRun:
    """Where a tracker keeps this run: `url` is None where it has no page (offline W&B, an
    MLflow store that is not an http(s) server)."""

    tracker: str  # "wandb" or "mlflow", as in the `tracker_run` line
    run_id: str
    url: str | None


class Tracker(Protocol):
    label: str  # for people: "W&B", "MLflow"

    def start(
        self, *, config: dict[str, Any], run_name: str | None, group: str | None
    ) -> TrackerRun:
        """Open the run and record `config`; raises whatever the library raises."""

    def log(self, metrics: dict[str, float], *, step: int) -> None: ...

    def finish(self, *, failed: bool) -> None: ...


class WandbTracker:
    label = "W&B"

    def __init__(self, environ: Mapping[str, str]) -> None:
        self.environ = environ
        self.run: Any = None

    def start(
        self, *, config: dict[str, Any], run_name: str | None, group: str | None
    ) -> TrackerRun:
        import wandb

        self.run = wandb.init(
            project=self.environ.get("WANDB_PROJECT") or DEFAULT_PROJECT,
            config=config,
            # wandb's own variables win over ours: a job may name its runs itself.
            name=None if self.environ.get("WANDB_NAME") else run_name,
            group=None if self.environ.get("WANDB_RUN_GROUP") else group,
            # Stdout carries the trainer's JSON lines: wandb must not wrap it.
            settings=wandb.Settings(console="off"),
        )
        return TrackerRun("wandb", self.run.id, self.run.url or None)

    def log(self, metrics: dict[str, float], *, step: int) -> None:
        self.run.log(metrics, step=step)

    def finish(self, *, failed: bool) -> None:
        self.run.finish(exit_code=1 if failed else 0)


class MlflowTracker:
    label = "MLflow"

    def __init__(self, environ: Mapping[str, str]) -> None:
        self.uri = environ["MLFLOW_TRACKING_URI"].strip()
        self.experiment = environ.get("MLFLOW_EXPERIMENT_NAME") or DEFAULT_PROJECT
        self.client: Any = None
        self.run_id = ""
        self.pending: list[Any] = []  # mlflow's RunOperations of the metrics in flight

    def start(
        self, *, config: dict[str, Any], run_name: str | None, group: str | None
    ) -> TrackerRun:
        for name, value in MLFLOW_HTTP_DEFAULTS.items():
            os.environ.setdefault(name, value)
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(tracking_uri=self.uri)
        experiment_id = self._experiment_id()
        tags = {"trainyard.job_id": group} if group else {}
        run = self.client.create_run(experiment_id, run_name=run_name, tags=tags)
        self.run_id = run.info.run_id
        params = [Param(key, str(value)[:MAX_PARAM_CHARS]) for key, value in config.items()]
        self.client.log_batch(self.run_id, params=params)
        return TrackerRun(
            "mlflow", self.run_id, mlflow_run_url(self.uri, experiment_id, self.run_id)
        )

    def _experiment_id(self) -> str:
        found = self.client.get_experiment_by_name(self.experiment)
        if found is not None:
            return found.experiment_id
        try:
            return self.client.create_experiment(self.experiment)
        except Exception:
            # Another run (a sweep's neighbour) may have created it a moment ago.
            found = self.client.get_experiment_by_name(self.experiment)
            if found is None:
                raise
            return found.experiment_id

    def log(self, metrics: dict[str, float], *, step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [Metric(key, value, now, step) for key, value in metrics.items()]
        # In the background: a step must not wait for a round trip to the server. Failures
        # surface in `finish`, which waits for them all.
        self.pending.append(self.client.log_batch(self.run_id, metrics=batch, synchronous=False))

    def finish(self, *, failed: bool) -> None:
        try:
            for operations in self.pending:
                operations.wait()
        finally:
            self.client.set_terminated(self.run_id, status="FAILED" if failed else "FINISHED")


def mlflow_run_url(uri: str, experiment_id: str, run_id: str) -> str | None:
    """The run's page on an http(s) tracking server, without any credentials the URI holds;
    None for any other store (a file or database has no page)."""
    parts = urlsplit(uri)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    base = urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))
    return f"{base}/#/experiments/{experiment_id}/runs/{run_id}"


def trackers_from_env(environ: Mapping[str, str]) -> list[Tracker]:
    """The trackers the environment asks for, none started."""
    found: list[Tracker] = []
    mode = environ.get("WANDB_MODE", "").strip().lower()
    if mode != "disabled" and (environ.get("WANDB_API_KEY", "").strip() or mode == "offline"):
        found.append(WandbTracker(environ))
    if environ.get("MLFLOW_TRACKING_URI", "").strip():
        found.append(MlflowTracker(environ))
    return found


# The package each tracker needs, for the warning when it is missing.
_PACKAGES = {"W&B": "wandb", "MLflow": "mlflow-skinny"}


class Reporting:
    """The run's trackers. Every method is safe to call whatever state they are in: a tracker
    that raises is dropped (one warning line) and the others go on."""

    def __init__(self, trackers: list[Tracker]) -> None:
        self.trackers = list(trackers)
        self.failed = False

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Reporting:
        return cls(trackers_from_env(os.environ if environ is None else environ))

    def start(self, config: dict[str, Any], *, environ: Mapping[str, str] | None = None) -> None:
        """Open a run in each tracker and print its `tracker_run` line."""
        env = os.environ if environ is None else environ
        job_id = env.get(ENV_JOB_ID) or None
        attempt = env.get(ENV_ATTEMPT) or "1"
        run_name = f"{job_id}-attempt-{attempt}" if job_id else None
        for tracker in list(self.trackers):
            run = self._guard(
                tracker,
                "cannot start a run",
                lambda t=tracker: t.start(config=config, run_name=run_name, group=job_id),
            )
            if run is not None:
                emit(LINE_TRACKER_RUN, tracker=run.tracker, run_id=run.run_id, url=run.url)

    def log(self, metrics: dict[str, float | None], *, step: int) -> None:
        """Record `metrics` at `step`; None and non-finite numbers (but for a NaN loss,
        which a diverged run must show) are left out."""
        numbers = {
            key: float(value)
            for key, value in metrics.items()
            if value is not None and (math.isfinite(value) or key == "train/loss")
        }
        if not numbers:
            return
        for tracker in list(self.trackers):
            self._guard(
                tracker, "cannot record metrics", lambda t=tracker: t.log(numbers, step=step)
            )

    def finish(self, *, failed: bool) -> None:
        for tracker in list(self.trackers):
            self._guard(tracker, "cannot close the run", lambda t=tracker: t.finish(failed=failed))
        self.trackers = []

    def _guard(self, tracker: Tracker, doing: str, call: Callable[[], Any]) -> Any:
        try:
            return call()
        except ImportError as error:
            package = _PACKAGES.get(tracker.label, "")
            warn(
                f"{tracker.label} reporting is asked for, but {error.name or package} is not "
                f"installed here (pip install {package}); training goes on without it"
            )
        except Exception as error:
            reason = " ".join(str(error).split())[:300] or type(error).__name__
            warn(f"{tracker.label}: {doing} ({reason}); training goes on without it")
        self.trackers.remove(tracker)
        return None
