"""An ended job's log archive for real: the terminal transition sends `jobs.archive_log`,
the stack's worker writes the gzip file, and the stack's web server serves `logs.txt` from
it, the same text the database gives (`?source=user` is always read from the database)."""

from __future__ import annotations

from pathlib import Path

import pytest

from apps.jobs.models import Job, LogLine
from tests.integration.conftest import TERMINAL
from tests.integration.stack import wait_for

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


def _media_root(stack) -> Path:
    env = stack.env()
    return Path(env.get("MEDIA_ROOT") or Path(env["TRAINYARD_VAR_DIR"]) / "media")


def test_the_worker_archives_an_ended_jobs_log_and_logs_txt_serves_it(api, stack):
    script = "seq 1 20000; echo 'naïve ✓ done'"
    job = api.submit(command=["bash", "-c", script])
    done = api.wait_state(job["id"], TERMINAL, timeout=120)
    assert done["state"] == "succeeded"

    def archived() -> Job | None:
        row = Job.objects.get(public_id=job["id"])
        total = row.user_log_lines + row.system_log_lines
        return row if row.log_archive_name and row.log_archive_lines == total else None

    row = wait_for(archived, 60, "the worker to archive the log")
    path = f"{api.base}/api/v1/compute/jobs/{job['id']}/logs.txt"
    packed = api.session.get(path, headers={"Accept-Encoding": "gzip"}, timeout=30)
    plain = api.session.get(path, headers={"Accept-Encoding": "identity"}, timeout=30)
    user = api.session.get(path, params={"source": "user"}, timeout=30)

    assert packed.headers["Content-Encoding"] == "gzip"
    assert "Content-Encoding" not in plain.headers
    assert packed.text == plain.text  # requests un-gzips it
    stored = LogLine.objects.filter(job_id=row.pk).order_by("id").values_list("message")
    assert plain.text == "".join(f"{message}\n" for (message,) in stored)
    assert plain.headers["X-Trainyard-Log-Lines"] == str(row.log_archive_lines)
    assert row.log_archive_lines > 20001  # the system lines too
    assert user.text == "".join(f"{n}\n" for n in range(1, 20001)) + "naïve ✓ done\n"
    assert (_media_root(stack) / row.log_archive_name).is_file()
