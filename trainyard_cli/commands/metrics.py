"""`trainyard metrics JOB [--name NAME]`: the series a job reported and their latest
values; with --name, every point of that series."""

from __future__ import annotations

import argparse

from trainyard_cli import output
from trainyard_cli.commands import Context, seg
from trainyard_cli.commands.jobs import JOBS

PAGE = 500


def run(ctx: Context, args: argparse.Namespace) -> int:
    path = f"{JOBS}/{seg(args.job)}/metrics"
    params = {"name": args.name, "since_step": args.since_step, "limit": PAGE}
    names: list[dict] = []
    points: list[dict] = []
    if not (args.name or args.json):  # the names and their latest values are on any page
        params["limit"] = 1
        names = ctx.client.get_json(path, params).get("names", [])
    for page in ctx.client.pages(path, params) if args.name or args.json else []:
        names = names or page.get("names", [])
        points += page["data"]
    if args.json:
        output.print_json(
            {"names": names, "data": points, "next_cursor": None, "total": len(points)}
        )
        return 0
    if args.name:
        output.table(
            f"{args.name} of {args.job}",
            ["step", "value", "time", "attempt"],
            ([p["step"], p["value"], output.when(p["time"]), p["attempt"]] for p in points),
        )
        return 0
    latest = [(n["name"], n.get("latest") or {}) for n in names]
    output.table(
        f"Metrics of {args.job}",
        ["name", "latest", "step", "time"],
        ([name, last.get("value"), last.get("step"), output.when(last.get("time"))]
         for name, last in latest),
    )  # fmt: skip
    return 0
