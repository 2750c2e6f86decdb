"""`trainyard jobs submit | plan | list | get`, and `trainyard terminate`."""

from __future__ import annotations

import argparse
import base64
import os
import uuid
from decimal import Decimal, InvalidOperation
from pathlib import Path

from trainyard_cli import output
from trainyard_cli.client import UsageError
from trainyard_cli.commands import Context, seg
from trainyard_cli.commands.uploads import upload_workdir

JOBS = "/api/v1/compute/jobs"
MAX_NAME = 200


def parse_env(items: list[str]) -> dict[str, str]:
    """`K=V` pairs; a bare `K` takes the value of K in this shell (as `docker run -e K`)."""
    env: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not name:
            raise UsageError(f"--env {item!r}: expected NAME=VALUE.")
        if not sep:
            if name not in os.environ:
                raise UsageError(f"--env {name}: not set in this shell; give NAME=VALUE.")
            value = os.environ[name]
        env[name] = value
    return env


def parse_secrets(items: list[str]) -> dict[str, dict[str, str]]:
    """`NAME=SECRET_ID:KEY`: the variable NAME gets key KEY of the stored secret."""
    refs: dict[str, dict[str, str]] = {}
    for item in items:
        name, _, ref = item.partition("=")
        secret_id, _, key = ref.partition(":")
        if not (name and secret_id and key):
            raise UsageError(f"--secret {item!r}: expected NAME=SECRET_ID:KEY.")
        refs[name] = {"secret_id": secret_id, "key": key}
    return refs


def money(value: str | None, flag: str) -> str | None:
    """A dollar amount kept exact (sent as a decimal string, as the API takes it)."""
    if value is None:
        return None
    try:
        amount = Decimal(value.lstrip("$"))
    except InvalidOperation as exc:
        raise UsageError(f"{flag} {value!r}: not an amount of dollars.") from exc
    return str(amount)


def limits_of(args: argparse.Namespace) -> dict:
    limits = {
        "max_runtime_hours": args.max_runtime_hours,
        "max_cost_usd": money(args.max_cost, "--max-cost"),
        "max_price_usd_hr": money(args.max_price, "--max-price"),
    }
    return {k: v for k, v in limits.items() if v is not None}


def default_name(args: argparse.Namespace) -> str:
    if args.script:
        return Path(args.script).name[:MAX_NAME]
    return " ".join(args.job_command)[:MAX_NAME] or args.image[:MAX_NAME]


def build_body(args: argparse.Namespace, ctx: Context, workdir_id: str | None) -> dict:
    """The `POST /compute/jobs` body for the command line given."""
    container: dict = {"image": args.image}
    if args.script:
        try:
            script = Path(args.script).expanduser().read_bytes()
        except OSError as exc:
            raise UsageError(f"--script {args.script}: {exc.strerror}.") from exc
        container["script_b64"] = base64.b64encode(script).decode()
    else:
        container["command"] = args.job_command
    if args.env:
        container["env"] = parse_env(args.env)
    if args.secret:
        container["secret_env"] = parse_secrets(args.secret)
    if workdir_id:
        container["workdir"] = workdir_id
    body: dict = {
        "name": args.name or default_name(args),
        "compute": {
            "accelerator": args.accelerator,
            "gpu_count": args.gpus,
            "ephemeral_disk_gb": args.disk_gb,
        },
        "container": container,
    }
    if args.project:
        body["project"] = ctx.project_id(args.project)
    if args.priority:
        body["priority_class"] = args.priority
    if limits := limits_of(args):
        body["limits"] = limits
    return body


def submit(ctx: Context, args: argparse.Namespace) -> int:
    if bool(args.job_command) == bool(args.script):
        raise UsageError("Give a command after `--`, or --script FILE (one of them).")
    workdir_id = upload_workdir(ctx.client, args.workdir)["id"] if args.workdir else None
    body = build_body(args, ctx, workdir_id)
    key = args.idempotency_key or uuid.uuid4().hex
    job = ctx.client.post_json(JOBS, body, idempotency_key=key)
    if args.json:
        output.print_json(job)
        return 0
    output.out().print(job["id"], markup=False, highlight=False)
    output.info(f"Submitted {job['id']} ({job['state']}): {ctx.job_page(job['id'])}")
    output.info(f"Follow it with: trainyard logs -f {job['id']}")
    return 0


def plan(ctx: Context, args: argparse.Namespace) -> int:
    """A dry run of `submit`: where the job would run now, and why each other offer would
    not. Creates nothing (no job, no upload)."""
    if bool(args.job_command) == bool(args.script):
        raise UsageError("Give a command after `--`, or --script FILE (one of them).")
    answer = ctx.client.post_json(f"{JOBS}/plan", build_body(args, ctx, None))
    if args.json:
        output.print_json(answer)
        return 0
    print_plan(answer)
    return 0


def print_plan(answer: dict) -> None:
    """A plan answer (`POST jobs/plan`): the offer it would take, the hold, every offer."""
    offer = answer.get("offer")
    output.fields(
        [
            (
                "would run on",
                f"{offer['provider']} (offer {offer['offer']}, {offer['accelerator']}, "
                f"{output.usd(offer['price_usd_hr'])}/h)"
                if offer
                else "nothing now: it would wait",
            ),
            ("summary", answer.get("summary")),
            ("hold", output.usd(answer.get("hold_usd"))),
        ]
    )
    _print_offers(answer.get("offers") or [])


def _print_offers(offers: list[dict]) -> None:
    """One line per offer considered: why it is excluded, or that it could take the job."""
    console = output.out()
    for offer in offers:
        why = f"{offer['excluded']}: {offer['message']}" if offer.get("excluded") else "available"
        console.print(
            f"  {offer['provider']} offer {offer['offer']} ({offer['accelerator']}, "
            f"{offer['market']}): {why}",
            markup=False,
        )


def list_jobs(ctx: Context, args: argparse.Namespace) -> int:
    page = ctx.client.get_json(
        JOBS,
        {
            "limit": args.limit,
            "cursor": args.cursor,
            "state": args.state,
            "project": ctx.project_id(args.project),
        },
    )
    if args.json:
        output.print_json(page)
        return 0
    output.table(
        None,
        ["id", "name", "state", "accrued", "created"],
        (
            [job["id"], job["name"], job["state"], output.usd(job["accrued_usd"]),
             output.when(job["created_at"])]
            for job in page["data"]
        ),
    )  # fmt: skip
    if page.get("next_cursor"):
        output.info(
            f"{len(page['data'])} of {page['total']}; more with --cursor {page['next_cursor']}"
        )
    return 0


def _summary(job: dict) -> list[tuple[str, object]]:
    compute = job.get("compute") or {}
    rows: list[tuple[str, object]] = [
        ("id", job["id"]),
        ("name", job["name"]),
        ("kind", job.get("kind")),
        ("project", job.get("project")),
        ("state", job["state"] + (f" ({job['reason']})" if job.get("reason") else "")),
        ("compute", f"{compute.get('gpu_count')} x {compute.get('accelerator')}"),
        ("price", f"{output.usd(job.get('price_usd_hr'))}/h" if job.get("price_usd_hr") else None),
        ("accrued", output.usd(job.get("accrued_usd"))),
        ("created", output.when(job.get("created_at"))),
        ("started", output.when(job.get("started_at"))),
        ("ended", output.when(job.get("terminal_at"))),
        ("exit code", job.get("exit_code")),
        ("attempts", len(job.get("attempts") or [])),
    ]
    if job.get("rerun_of"):
        rows.append(("re-run of", job["rerun_of"]))
    if job.get("reruns"):
        rows.append(("re-runs", ", ".join(job["reruns"])))
    if job.get("job_file"):
        rows.append(("job file", job["job_file"]["name"]))
    if job.get("ssh"):
        rows.append(("ssh", job["ssh"]["command"]))
    for name, value in (job.get("latest_metrics") or {}).items():
        rows.append((f"metric {name}", value))
    return rows


def get(ctx: Context, args: argparse.Namespace) -> int:
    job = ctx.client.get_json(f"{JOBS}/{seg(args.job)}")
    if args.json:
        output.print_json(job)
        return 0
    waiting = job.get("waiting_reason")
    rows = [*_summary(job), ("page", ctx.job_page(job["id"]))]
    if waiting:
        rows.append(("waiting", waiting["summary"]))
    output.fields(rows)
    if waiting:
        _print_offers(waiting.get("offers") or [])
    return 0


def terminate(ctx: Context, args: argparse.Namespace) -> int:
    job = ctx.client.post_json(f"{JOBS}/{seg(args.job)}/terminate")
    if args.json:
        output.print_json(job)
    else:
        output.info(f"{job['id']}: {job['state']}")
    return 0
