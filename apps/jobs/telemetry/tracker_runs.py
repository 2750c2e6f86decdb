"""A workload's `tracker_run` lines (the built-in trainer prints one per W&B or MLflow run it
opens, `trainer.trackers`) kept as the job's `tracker_run` events, which the job page links.

The line is the workload's own word about its run, so only what a link needs is kept, and
only in a shape that is safe to show: a known tracker, a short run id, and a URL only when it
is http(s) (a `javascript:` or `file:` address is dropped, the run id still shown).
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from apps.jobs import services
from apps.jobs.events import JobEventType
from apps.jobs.models import Job

TRACKERS = {"wandb": "W&B", "mlflow": "MLflow"}
MAX_RUN_ID_CHARS = 200
MAX_URL_CHARS = 2000
_RUN_ID = re.compile(r"^[\w.:-]+$", re.ASCII)


def record(job: Job, attempt: int, lines: list[dict]) -> None:
    """One `tracker_run` event per usable line; call in the batch's transaction (ingestion
    parses only lines stored for the first time, so a resent batch records nothing twice)."""
    for line in lines:
        run = clean(line)
        if run is None:
            continue
        label = TRACKERS[run["tracker"]]
        services.record_event(
            job=job,
            attempt=attempt,
            type=JobEventType.TRACKER_RUN,
            message=f"{label} run {run['run_id']}.",
            data=run,
        )


def clean(line: dict) -> dict | None:
    """`{tracker, run_id, url}` from a line, or None when it names no run we can show."""
    tracker, run_id, url = line.get("tracker"), line.get("run_id"), line.get("url")
    if tracker not in TRACKERS or not isinstance(run_id, str):
        return None
    if not 0 < len(run_id) <= MAX_RUN_ID_CHARS or not _RUN_ID.match(run_id):
        return None
    return {"tracker": tracker, "run_id": run_id, "url": url if _is_web_url(url) else None}


def _is_web_url(url: object) -> bool:
    if not isinstance(url, str) or len(url) > MAX_URL_CHARS or any(c.isspace() for c in url):
        return False
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)
