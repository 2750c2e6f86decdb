"""`trainyard sweep create | show | list | cancel`: a template run over a grid or a random
set of values (`POST /projects/{id}/sweeps`).

`create -f FILE` reads the API's body from a YAML (or JSON, which is YAML) file, plus an
optional `project:` (id or slug; `--project` wins). A file that is not valid YAML is
refused with the line and column of the problem; the API names any field it refuses.

```yaml
project: vision
name: lr x steps
template: {name: tiny, model: org/tiny, dataset: ds_…, max_steps: 10}
params: {learning_rate: [1.0e-4, 3.0e-4], max_steps: [10, 20]}
concurrency: 2
max_cost_usd: "5"
```
"""

from __future__ import annotations

import argparse
import uuid
from pathlib import Path

import yaml  # PyYAML: the API's schema library (drf-spectacular) and the hub client need it

from trainyard_cli import output
from trainyard_cli.client import UsageError
from trainyard_cli.commands import Context, seg


def read_file(path: str) -> dict:
    """The sweep body in `path`; UsageError naming the line for a file that is not YAML."""
    text = Path(path).expanduser().read_text(encoding="utf-8")
    try:
        body = yaml.safe_load(text)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "somewhere"
        raise UsageError(f"{path}: not valid YAML at {where}: {error.problem}.") from None
    except yaml.YAMLError as error:
        raise UsageError(f"{path}: not valid YAML: {error}.") from None
    if not isinstance(body, dict):
        raise UsageError(f"{path}: expected a mapping of the sweep's fields.")
    return body


def create(ctx: Context, args: argparse.Namespace) -> int:
    body = read_file(args.file)
    project = args.project or body.pop("project", None)
    body.pop("project", None)
    if not project:
        raise UsageError("Name the project: `project:` in the file, or --project.")
    if args.name:
        body["name"] = args.name
    if args.concurrency is not None:
        body["concurrency"] = args.concurrency
    if args.max_cost is not None:
        body["max_cost_usd"] = args.max_cost
    project_id = ctx.project_id(project)
    sweep = ctx.client.post_json(
        f"/api/v1/projects/{seg(project_id)}/sweeps",
        body,
        idempotency_key=args.idempotency_key or uuid.uuid4().hex,
    )
    if args.json:
        output.print_json(sweep)
        return 0
    output.out().print(sweep["id"], markup=False, highlight=False)
    output.info(
        f"Started sweep {sweep['id']}: {sweep['counts']['total']} trials, "
        f"{sweep['concurrency']} at a time."
    )
    return 0


def show(ctx: Context, args: argparse.Namespace) -> int:
    sweep = ctx.client.get_json(f"/api/v1/sweeps/{seg(args.sweep)}")
    if args.json:
        output.print_json(sweep)
        return 0
    _render(sweep)
    return 0


def list_sweeps(ctx: Context, args: argparse.Namespace) -> int:
    project_id = ctx.project_id(args.project)
    page = ctx.client.get_json(f"/api/v1/projects/{seg(project_id)}/sweeps")
    if args.json:
        output.print_json(page)
        return 0
    output.table(
        None,
        ["ID", "NAME", "STATUS", "TRIALS", "SUCCEEDED", "BEST", "COST"],
        [
            (
                sweep["id"],
                sweep["name"],
                sweep["status"],
                sweep["counts"]["total"],
                sweep["counts"].get("succeeded", 0),
                _best(sweep),
                output.usd(sweep["cost_usd"]),
            )
            for sweep in page["data"]
        ],
    )
    return 0


def cancel(ctx: Context, args: argparse.Namespace) -> int:
    sweep = ctx.client.post_json(f"/api/v1/sweeps/{seg(args.sweep)}/cancel")
    if args.json:
        output.print_json(sweep)
        return 0
    output.info(f"Sweep {sweep['id']} is {sweep['status']}.")
    return 0


def _best(sweep: dict) -> str:
    best = sweep.get("best")
    if not best:
        return "-"
    values = " ".join(f"{path}={value}" for path, value in best["values"].items())
    return f"#{best['index']} {sweep['objective']}={output.text(best['metric'])} {values}"


def _render(sweep: dict) -> None:
    output.fields(
        [
            ("id", sweep["id"]),
            ("name", sweep["name"]),
            ("status", sweep["status"]),
            ("concurrency", sweep["concurrency"]),
            ("cost", output.usd(sweep["cost_usd"])),
            ("cost cap", output.usd(sweep["max_cost_usd"])),
            ("best", _best(sweep)),
        ]
    )
    paths = list(sweep["params"])
    output.table(
        None,
        ["#", *paths, "STATE", sweep["objective"].upper(), "COST", "JOB"],
        [
            (
                f"{trial['index']}{' *' if trial['best'] else ''}",
                *(trial["values"].get(path) for path in paths),
                trial["state"],
                trial["metric"],
                output.usd(trial["cost_usd"]),
                trial["job_id"],
            )
            for trial in sweep["trials"]
        ],
    )
