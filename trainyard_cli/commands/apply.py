"""`trainyard apply -f job.yaml [--dry-run]` and `trainyard rerun JOB [--set key=value …]`.

`apply` sends a job file (`trainyard_cli.jobfile`) to its kind's create endpoint — a
container job to `POST /compute/jobs`, a fine-tune to `POST /projects/{id}/finetunes` — with
the file's text beside the body, so the job keeps it; `--dry-run` sends it to the matching
plan endpoint instead and creates nothing. The server validates every field; an error it
names by `param` is printed at that field's line in the file.

`rerun` asks `POST /compute/jobs/{id}/rerun` for a new job made like JOB, with each `--set`
deep-merged into JOB's request (`--set learning_rate=1e-4`, `--set compute.gpu_count=2`).
"""

from __future__ import annotations

import argparse
import json
import uuid

from trainyard_cli import jobfile, output
from trainyard_cli.client import ApiError, UsageError
from trainyard_cli.commands import Context, seg
from trainyard_cli.commands.jobs import JOBS, print_plan


def apply(ctx: Context, args: argparse.Namespace) -> int:
    job_file = jobfile.load(args.file)
    body = job_file.body()
    try:
        project_id = ctx.project_id(job_file.data.get("project"))
    except UsageError as error:
        raise job_file.error("project", error.message) from None
    if job_file.kind == "finetune":
        create = f"/api/v1/projects/{seg(project_id)}/finetunes"
    else:
        create = JOBS
        if project_id:
            body["project"] = project_id
    try:
        if args.dry_run:
            answer = ctx.client.post_json(f"{create}/plan", body)
        else:
            answer = ctx.client.post_json(
                create, body, idempotency_key=args.idempotency_key or uuid.uuid4().hex
            )
    except ApiError as error:
        if error.status < 500 and (error.param or error.status == 400):
            raise job_file.error(error.param, error.message) from None
        raise
    if args.json:
        output.print_json(answer)
    elif args.dry_run:
        output.info(f"{job_file.name}: a dry run; nothing was created.")
        print_plan(answer)
    else:
        output.out().print(answer["id"], markup=False, highlight=False)
        output.info(f"Created {answer['id']} ({answer['state']}): {ctx.job_page(answer['id'])}")
    return 0


def parse_sets(items: list[str]) -> dict:
    """`--set a.b=value` pairs as nested overrides. A value is JSON where it reads as JSON
    (`2`, `1e-4`, `true`, `null`, `["python", "x.py"]`), else the text as given."""
    overrides: dict = {}
    for item in items:
        key, sep, text = item.partition("=")
        parts = key.split(".")
        if not sep or not all(parts):
            raise UsageError(f"--set {item!r}: expected KEY=VALUE (KEY may be dotted: a.b).")
        try:
            value = json.loads(text)
        except ValueError:
            value = text
        node = overrides
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise UsageError(f"--set {item!r}: {part} is set to a value above.")
        node[parts[-1]] = value
    return overrides


def rerun(ctx: Context, args: argparse.Namespace) -> int:
    job = ctx.client.post_json(
        f"{JOBS}/{seg(args.job)}/rerun",
        parse_sets(args.set),
        idempotency_key=args.idempotency_key or uuid.uuid4().hex,
    )
    if args.json:
        output.print_json(job)
        return 0
    output.out().print(job["id"], markup=False, highlight=False)
    output.info(f"Re-running {args.job} as {job['id']} ({job['state']}): {ctx.job_page(job['id'])}")
    return 0
