"""`trainyard usage [--from --to] [--csv]`: what each job was billed in a window."""

from __future__ import annotations

import argparse
import sys

from trainyard_cli import output
from trainyard_cli.commands import Context


def run(ctx: Context, args: argparse.Namespace) -> int:
    params = {"from": args.since, "to": args.until, "resource_type": args.resource_type}
    if args.csv:
        with ctx.client.stream("GET", "/api/v1/compute/usage.csv", params=_set(params)) as body:
            for chunk in body.iter_bytes():
                sys.stdout.buffer.write(chunk)
        sys.stdout.flush()
        return 0
    page = ctx.client.get_json(
        "/api/v1/compute/usage", {**params, "limit": args.limit, "cursor": args.cursor}
    )
    if args.json:
        output.print_json(page)
        return 0
    window = page["window"]
    output.table(
        f"Usage {output.when(window['from'])} to {output.when(window['to'])} (UTC)",
        ["resource", "name", "type", "billed", "accrued"],
        ([row["resource_id"], row["name"], row["resource_type"],
          f"{row['billable_seconds'] // 60} min", output.usd(row["accrued_usd"])]
         for row in page["data"]),
    )  # fmt: skip
    summary = page["summary"]
    output.out().print(f"Total: {output.usd(summary['total_usd'])}", markup=False)
    if page.get("next_cursor"):
        output.info(
            f"{len(page['data'])} of {page['total']} rows; more with --cursor {page['next_cursor']}"
        )
    return 0


def _set(params: dict) -> dict:
    return {k: v for k, v in params.items() if v}
