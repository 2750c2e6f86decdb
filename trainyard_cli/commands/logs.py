"""`trainyard logs JOB [-f]`: print a job's log lines; with -f, follow them until the job
ends and exit with the job's exit code, so `trainyard logs -f $JOB && next-step` works.

The log is read in the API's largest pages (a whole log in few round trips); following
catches up the same way, then polls the logs endpoint with its cursor. The last page of a
list has no `next_cursor`, so the follower keeps the cursor of the last full page and
remembers the ids it printed since: asking again from that cursor returns those lines and
any new ones, and only the new ones are printed (at most one page is ever asked for twice;
once caught up, a follower's pages are small, so a poll asks again for few lines). The
job's state is read before each round of log pages, and the follower stops after a round
that began with the job ended, so lines written just before the end are never cut off. A
server that goes away for a while (a restart, a deploy) is waited for, up to
`RECONNECT_S`; the job runs on without us meanwhile, and no line is lost or printed twice.
"""

from __future__ import annotations

import argparse
import sys
import time

from trainyard_cli import output
from trainyard_cli.client import ApiError, CliError, ConnectionProblem
from trainyard_cli.commands import Context, seg
from trainyard_cli.commands.jobs import JOBS

TERMINAL = frozenset({"succeeded", "failed", "terminated"})
# The API's largest page: a long log comes in few round trips (100,000 lines in ten),
# gzipped on the way (httpx asks for it). Once caught up, a follower asks for smaller
# pages: each poll asks again for the lines after the last full page's cursor.
PAGE = 10_000
FOLLOW_PAGE = 500
RECONNECT_S = 120.0


def job_exit_code(job: dict) -> int:
    """0 when it succeeded; the workload's exit code when it failed with one (kept within
    0-255 as a process's is; a signal's negative code becomes 128+N); else 1."""
    if job["state"] == "succeeded":
        return 0
    code = job.get("exit_code")
    if job["state"] == "failed" and isinstance(code, int) and code != 0:
        code = 128 - code if code < 0 else code
        return code & 0xFF or 1
    return 1


def print_lines(lines: list[dict], as_json: bool) -> None:
    """Each line where it belongs (the workload's stderr lines and the platform's on
    stderr, `[trainyard]` before the platform's). A stream is flushed when the next line
    goes to the other one, and both at the end: few writes, and `2>&1` keeps the order."""
    last = sys.stdout
    for line in lines:
        if as_json:
            output.print_json_line(line, flush=False)
            continue
        message = line.get("message", "")
        system = line.get("source") == "system"
        stream = sys.stderr if system or line.get("stream") == "stderr" else sys.stdout
        if stream is not last:
            last.flush()
            last = stream
        stream.write(f"[trainyard] {message}\n" if system else message + "\n")
    sys.stdout.flush()
    sys.stderr.flush()


class Follower:
    """New log lines of one job, page by page, each line once."""

    def __init__(self, ctx: Context, job_id: str, source: str | None) -> None:
        self.ctx, self.path, self.source = ctx, f"{JOBS}/{seg(job_id)}/logs", source
        self.cursor: str | None = None
        self.seen: set[str] = set()

    def new_lines(self, limit: int = PAGE) -> list[dict]:
        fresh: list[dict] = []
        while True:
            page = self.ctx.client.get_json(
                self.path, {"limit": limit, "source": self.source, "cursor": self.cursor}
            )
            fresh += [line for line in page["data"] if line["id"] not in self.seen]
            if page.get("next_cursor"):
                self.cursor, self.seen = page["next_cursor"], set()
            else:
                self.seen.update(line["id"] for line in page["data"])
                return fresh


def _transient(error: CliError) -> bool:
    """No answer, or a server error: worth waiting out while following."""
    return isinstance(error, ConnectionProblem) or (
        isinstance(error, ApiError) and error.status >= 500
    )


def run(ctx: Context, args: argparse.Namespace) -> int:
    job_path = f"{JOBS}/{seg(args.job)}"
    follower = Follower(ctx, args.job, args.source)
    if not args.follow:
        lines = follower.new_lines()
        if args.json:
            output.print_json({"data": lines, "next_cursor": None, "total": len(lines)})
        else:
            print_lines(lines, False)
        return 0
    away_since: float | None = None
    caught_up = False
    while True:
        try:
            job = ctx.client.get_json(job_path)
            lines = follower.new_lines(FOLLOW_PAGE if caught_up else PAGE)
            print_lines(lines, args.json)
            caught_up = True
        except CliError as error:
            if not _transient(error):
                raise
            now = time.monotonic()
            if away_since is None:
                away_since = now
                output.info(f"Lost the server ({error.message}); retrying…")
            elif now - away_since > RECONNECT_S:
                raise
            time.sleep(max(args.interval, 1.0))
            continue
        away_since = None
        if job["state"] in TERMINAL:
            break
        time.sleep(args.interval)
    code = job_exit_code(job)
    if not args.json:
        detail = f", exit code {job['exit_code']}" if job.get("exit_code") is not None else ""
        reason = f" ({job['reason']})" if job.get("reason") else ""
        output.info(f"{job['id']} {job['state']}{reason}{detail}")
    return code
