"""`trainyard datasets upload PROJECT FILE`: upload a dataset; the server checks every row
(a bad one is a 400 naming the row and field, and nothing is stored)."""

from __future__ import annotations

import argparse

from trainyard_cli import output
from trainyard_cli.commands import Context
from trainyard_cli.commands.uploads import upload_dataset


def upload(ctx: Context, args: argparse.Namespace) -> int:
    dataset = upload_dataset(
        ctx.client, ctx.project_id(args.project), args.file, name=args.name, fmt=args.format
    )
    if args.json:
        output.print_json(dataset)
        return 0
    output.out().print(dataset["id"], markup=False, highlight=False)
    output.info(
        f"Uploaded {dataset['id']}: {dataset.get('name')} ({dataset.get('format')}, "
        f"{dataset.get('rows')} rows, sha256 {dataset.get('sha256')})."
    )
    return 0
