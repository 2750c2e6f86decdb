"""`trainyard finetune`: start a managed LoRA fine-tune (`POST /projects/{id}/finetunes`),
from a dataset already uploaded (`ds_…`), a hub id, or a local file uploaded first."""

from __future__ import annotations

import argparse
import uuid

from trainyard_cli import output
from trainyard_cli.client import UsageError
from trainyard_cli.commands import Context, seg
from trainyard_cli.commands.jobs import limits_of, parse_secrets
from trainyard_cli.commands.uploads import upload_dataset


def run(ctx: Context, args: argparse.Namespace) -> int:
    if bool(args.dataset) == bool(args.dataset_file):
        raise UsageError("Give --dataset ID (or a hub id) or --dataset-file FILE (one of them).")
    project_id = ctx.project_id(args.project)
    dataset = args.dataset
    if args.dataset_file:
        uploaded = upload_dataset(
            ctx.client, project_id, args.dataset_file, name=None, fmt=args.format
        )
        output.info(f"Uploaded {uploaded['id']} ({uploaded.get('rows')} rows).")
        dataset = uploaded["id"]
    body: dict = {
        "name": args.name or f"finetune {args.model}"[:200],
        "model": args.model,
        "dataset": dataset,
        "compute": {
            "accelerator": args.accelerator,
            "gpu_count": args.gpus,
            "ephemeral_disk_gb": args.disk_gb,
        },
    }
    optional = {
        "dataset_format": args.format,
        "max_steps": args.max_steps,
        "max_samples": args.max_samples,
        "learning_rate": args.learning_rate,
        "merge": True if args.merge else None,
        "priority_class": args.priority,
        "limits": limits_of(args) or None,
        "secret_env": parse_secrets(args.secret) or None,
    }
    body.update({k: v for k, v in optional.items() if v is not None})
    job = ctx.client.post_json(
        f"/api/v1/projects/{seg(project_id)}/finetunes",
        body,
        idempotency_key=args.idempotency_key or uuid.uuid4().hex,
    )
    if args.json:
        output.print_json(job)
        return 0
    output.out().print(job["id"], markup=False, highlight=False)
    output.info(f"Started fine-tune {job['id']} ({job['state']}): {ctx.job_page(job['id'])}")
    return 0
