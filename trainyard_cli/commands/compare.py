"""`trainyard compare JOB JOB…`: the jobs side by side, as `GET /compute/jobs/compare`
answers — each job's state, cost and duration, the settings whose values differ, and each
metric's final and best value (`final / best`; only the final one of a schedule such
as the learning rate)."""

from __future__ import annotations

import argparse

from trainyard_cli import output
from trainyard_cli.commands import Context
from trainyard_cli.commands.jobs import JOBS


def run(ctx: Context, args: argparse.Namespace) -> int:
    # The ids go as one comma-separated value; the API says what is wrong with a pick.
    body = ctx.client.get_json(f"{JOBS}/compare", {"ids": ",".join(args.jobs)})
    if args.json:
        output.print_json(body)
        return 0
    jobs = body["jobs"]
    output.table(
        "Jobs",
        ["id", "name", "state", "duration", "cost"],
        ([job["id"], job["name"], job["state"], _duration(job["duration_s"]),
          output.usd(job["accrued_usd"])] for job in jobs),
    )  # fmt: skip
    names = [job["name"] for job in jobs]
    if body["differences"]:
        output.table(
            "Differences",
            ["setting", *names],
            ([key, *(values.get(job["id"]) for job in jobs)]
             for key, values in body["differences"].items()),
        )  # fmt: skip
    else:
        output.info("Their configurations are the same.")
    if body["metric_names"]:
        output.table(
            "Metrics (final / best)",
            ["metric", *names],
            ([name, *(_final_best(job["metrics"].get(name)) for job in jobs)]
             for name in body["metric_names"]),
        )  # fmt: skip
    return 0


def _final_best(summary: dict | None) -> str:
    if summary is None:
        return "-"
    if summary["goal"] is None:  # a schedule (epoch, learning rate): no value is best
        return output.text(summary["final"])
    return f"{output.text(summary['final'])} / {output.text(summary['best'])}"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m" if hours else f"{minutes}m {secs:02d}s"
