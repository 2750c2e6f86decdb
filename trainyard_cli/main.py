"""The `trainyard` entry point: the parser, and the one place that turns errors into exit
codes (0 ok; 2 a usage error or the API's 4xx; 3 no answer or a 5xx; `logs -f` the job's).

A job's command goes after `--` (`trainyard jobs submit python:3.12 -- python train.py -v`,
`trainyard ssh JOB -- nvidia-smi`): everything after the first `--` is the command, taken
verbatim, never parsed as our flags. `ssh` and `port-forward` exit with ssh's status.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import httpx

from trainyard_cli import __version__, config, output
from trainyard_cli.client import Client, CliError, ConnectionProblem, UsageError
from trainyard_cli.commands import (
    Context,
    apply,
    artifacts,
    compare,
    datasets,
    finetune,
    jobs,
    login,
    logs,
    metrics,
    models,
    ssh,
    sweeps,
    usage,
)

EXIT_INTERRUPTED = 130


class Parser(argparse.ArgumentParser):
    """argparse's errors exit 2 as ours do, with the same one-line `Error:` shape."""

    def error(self, message: str):
        raise UsageError(f"{message} (see `{self.prog} --help`)")


def _json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--json", action="store_true", help="print the API's JSON (and nothing else) on stdout"
    )
    _insecure_flag(parser, default=argparse.SUPPRESS)


def _insecure_flag(parser: argparse.ArgumentParser, *, default: object) -> None:
    # On the top parser (False) and every command (SUPPRESS, so a flag given before the
    # command is not reset by the command's own default).
    parser.add_argument(
        "--insecure",
        action="store_true",
        default=default,
        help="allow plain http:// to a host other than this one (the key travels in clear)",
    )


def _job_body_flags(p: argparse.ArgumentParser, *, workdir: bool) -> None:
    """What describes a container job, for `jobs submit` and `jobs plan`."""
    p.add_argument(
        "image",
        help="container image: on podman or docker one in the host's store or a registry "
        "(`localhost/trainyard-trainer:<version>`, which `make run` builds, has python3 and "
        "torch); the host runtime ignores it",
    )
    p.add_argument("--script", metavar="FILE", help="a script to run instead of a command")
    if workdir:
        p.add_argument(
            "--workdir", metavar="DIR", help="pack DIR (honouring .gitignore) and ship it"
        )
    p.add_argument("--env", action="append", default=[], metavar="K=V")
    p.add_argument("--secret", action="append", default=[], metavar="NAME=SECRET_ID:KEY")
    p.add_argument("--project", help="project id (proj_…) or slug; default: `default`")
    _compute_flags(p)
    _json_flag(p)


def _ssh_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-i", "--identity", metavar="FILE", help="the private key ssh offers (ssh's -i)"
    )
    parser.add_argument(
        "--accept-new-host-key",
        action="store_true",
        help="replace the gateway host key pinned in ~/.config/trainyard/known_hosts when "
        "the control plane's has changed",
    )
    _insecure_flag(parser, default=argparse.SUPPRESS)


# The server's one default per kind (apps.jobs.specs.DEFAULT_DISK_GB; tests/cli keeps these
# equal to it): a container job 10 GB of ephemeral disk, a fine-tune 20 (the base model, its
# checkpoints and the adapter).
CONTAINER_DISK_GB = 10
FINETUNE_DISK_GB = 20


def _compute_flags(parser: argparse.ArgumentParser, *, disk_gb: int = CONTAINER_DISK_GB) -> None:
    parser.add_argument("--accelerator", default="cpu", help="catalog name (default: cpu)")
    parser.add_argument(
        "--count",
        "--gpus",
        dest="gpus",
        type=int,
        default=1,
        help="how many of the accelerator: GPUs for a GPU; cpu comes as 1 (default: 1)",
    )
    parser.add_argument(
        "--disk-gb", type=int, default=disk_gb, help=f"ephemeral disk (default: {disk_gb})"
    )
    parser.add_argument("--priority", choices=["standard", "preemptible"])
    parser.add_argument("--max-runtime-hours", type=float)
    parser.add_argument("--max-cost", metavar="USD", help="stop the job at this spend")
    parser.add_argument("--max-price", metavar="USD", help="price ceiling per GPU-hour")
    parser.add_argument("--name")
    parser.add_argument(
        "--idempotency-key", help="reuse to make a retried submit return the same job"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="trainyard",
        description="Run and watch jobs on a Trainyard control plane.",
        epilog="Reads TRAINYARD_URL and TRAINYARD_API_KEY, else the file `trainyard login` "
        "writes ($XDG_CONFIG_HOME/trainyard/config.json).",
    )
    parser.add_argument("--version", action="version", version=f"trainyard {__version__}")
    _insecure_flag(parser, default=False)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)

    p = commands.add_parser("login", help="check a URL and API key and save them (0600)")
    p.add_argument("--url", help="the control plane, e.g. https://trainyard.example.com")
    p.add_argument(
        "--api-key-stdin",
        action="store_true",
        help="read the key from stdin (else TRAINYARD_API_KEY, else a prompt)",
    )
    # Gone (a key in argv shows in `ps` and shell history), but still parsed: argparse would
    # otherwise read `--api-key` as short for `--api-key-stdin` and echo the key back as an
    # unrecognized argument.
    p.add_argument("--api-key", nargs="?", const="", help=argparse.SUPPRESS)
    _json_flag(p)
    p.set_defaults(handler=None)

    group = commands.add_parser("jobs", help="submit, list and read jobs")
    job_commands = group.add_subparsers(dest="jobs_command", metavar="COMMAND")
    job_commands.required = True
    p = job_commands.add_parser(
        "submit",
        help="submit a job: IMAGE [options] -- COMMAND...",
        usage="trainyard jobs submit IMAGE [options] (-- COMMAND ... | --script FILE)",
    )
    _job_body_flags(p, workdir=True)
    p.set_defaults(handler=jobs.submit, takes_command=True)
    p = job_commands.add_parser(
        "plan",
        help="where a job would run now, and why not elsewhere (creates nothing)",
        usage="trainyard jobs plan IMAGE [options] (-- COMMAND ... | --script FILE)",
    )
    _job_body_flags(p, workdir=False)  # --workdir would upload the code
    p.set_defaults(handler=jobs.plan, takes_command=True)
    p = job_commands.add_parser("list", help="jobs, newest first")
    p.add_argument("--state")
    p.add_argument("--project")
    p.add_argument("--limit", type=int, default=50)
    p.add_argument("--cursor")
    _json_flag(p)
    p.set_defaults(handler=jobs.list_jobs)
    p = job_commands.add_parser("get", help="one job")
    p.add_argument("job")
    _json_flag(p)
    p.set_defaults(handler=jobs.get)

    p = commands.add_parser("apply", help="create the job a job file describes (-f job.yaml)")
    p.add_argument("-f", "--file", required=True, metavar="FILE", help="the job file (YAML)")
    p.add_argument(
        "--dry-run", action="store_true", help="show the plan (offers, price, hold); create nothing"
    )
    p.add_argument("--idempotency-key", help="reuse to make a retried apply return the same job")
    _json_flag(p)
    p.set_defaults(handler=apply.apply)

    p = commands.add_parser("rerun", help="run a job again, with --set overrides")
    p.add_argument("job")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a field of the job's request (dotted: compute.gpu_count=2); "
        "the value is JSON where it reads as JSON",
    )
    p.add_argument("--idempotency-key", help="reuse to make a retried rerun return the same job")
    _json_flag(p)
    p.set_defaults(handler=apply.rerun)

    p = commands.add_parser("logs", help="a job's log lines; -f follows until it ends")
    p.add_argument("job")
    p.add_argument("-f", "--follow", action="store_true", help="exit with the job's exit code")
    p.add_argument("--source", choices=["user", "system"])
    p.add_argument("--interval", type=float, default=1.0, help=argparse.SUPPRESS)
    _json_flag(p)
    p.set_defaults(handler=logs.run)

    p = commands.add_parser("metrics", help="a job's metric series")
    p.add_argument("job")
    p.add_argument("--name", help="every point of this series (e.g. loss)")
    p.add_argument("--since-step", type=int)
    _json_flag(p)
    p.set_defaults(handler=metrics.run)

    p = commands.add_parser(
        "compare", help="jobs side by side: differing settings, final and best metrics"
    )
    p.add_argument("jobs", nargs="+", metavar="JOB", help="2 to 10 job ids")
    _json_flag(p)
    p.set_defaults(handler=compare.run)

    p = commands.add_parser("terminate", help="terminate a job (idempotent)")
    p.add_argument("job")
    _json_flag(p)
    p.set_defaults(handler=jobs.terminate)

    p = commands.add_parser("finetune", help="start a managed LoRA fine-tune")
    p.add_argument("--project", required=True, help="project id (proj_…) or slug")
    p.add_argument(
        "--model",
        required=True,
        help="base model: ORG/NAME[@REV] of your organization's hub, a Hugging Face id, or a "
        "path on the host",
    )
    p.add_argument(
        "--dataset", help="an uploaded dataset (ds_…), ORG/NAME[@REV] of the hub, or a hub id"
    )
    p.add_argument("--dataset-file", metavar="FILE", help="upload FILE first, then train on it")
    p.add_argument("--format", help="alpaca, chatml, sharegpt, prompt_completion, text, …")
    p.add_argument("--max-steps", type=int)
    p.add_argument("--max-samples", type=int)
    p.add_argument("--learning-rate", type=float)
    p.add_argument(
        "--merge",
        action="store_true",
        help="also publish the base with the adapter merged in (merged/ in its hub repo)",
    )
    p.add_argument(
        "--secret",
        action="append",
        default=[],
        metavar="NAME=SECRET_ID:KEY",
        help="a variable for the trainer from a stored secret, e.g. WANDB_API_KEY or "
        "MLFLOW_TRACKING_URI to report the run to W&B or MLflow (repeatable)",
    )
    _compute_flags(p, disk_gb=FINETUNE_DISK_GB)
    _json_flag(p)
    p.set_defaults(handler=finetune.run)

    group = commands.add_parser("datasets", help="upload datasets")
    data_commands = group.add_subparsers(dest="datasets_command", metavar="COMMAND")
    data_commands.required = True
    p = data_commands.add_parser("upload", help="upload FILE to PROJECT (rows are checked)")
    p.add_argument("project", help="project id (proj_…) or slug")
    p.add_argument("file")
    p.add_argument("--format", help="alpaca, chatml, sharegpt, prompt_completion, text, …")
    p.add_argument("--name", help="default: the file's name without its extension")
    _json_flag(p)
    p.set_defaults(handler=datasets.upload)

    group = commands.add_parser("artifacts", help="list and download checkpoints and adapters")
    art_commands = group.add_subparsers(dest="artifacts_command", metavar="COMMAND")
    art_commands.required = True
    p = art_commands.add_parser("list", help="a job's artifacts")
    p.add_argument("job")
    _json_flag(p)
    p.set_defaults(handler=artifacts.list_artifacts)
    p = art_commands.add_parser("download", help="download one (the sha256 is checked)")
    p.add_argument("job")
    p.add_argument("artifact", help="art_…")
    p.add_argument("-o", "--output", metavar="FILE")
    _json_flag(p)
    p.set_defaults(handler=artifacts.download)

    group = commands.add_parser("models", help="push and pull hub repositories (/hf)")
    model_commands = group.add_subparsers(dest="models_command", metavar="COMMAND")
    model_commands.required = True
    p = model_commands.add_parser("push", help="commit the folder DIR to ORG/NAME (created)")
    p.add_argument("dir")
    p.add_argument("repo", metavar="ORG/NAME")
    p.add_argument("--revision", help="the branch to commit to (default: main)")
    p.add_argument("-m", "--message", help="the commit message")
    p.add_argument("--dataset", action="store_true", help="a dataset repository")
    _json_flag(p)
    p.set_defaults(handler=models.push)
    p = model_commands.add_parser("pull", help="download ORG/NAME into DIR (default: NAME)")
    p.add_argument("repo", metavar="ORG/NAME")
    p.add_argument("dir", nargs="?")
    p.add_argument("--revision", help="a branch, tag or commit (default: main)")
    p.add_argument("--dataset", action="store_true", help="a dataset repository")
    _json_flag(p)
    p.set_defaults(handler=models.pull)

    p = commands.add_parser(
        "ssh",
        help="a shell in a running job, or run COMMAND there (OpenSSH, through the gateway)",
        usage="trainyard ssh JOB [--identity FILE] [--accept-new-host-key] [-- COMMAND ...]",
    )
    p.add_argument("job")
    _ssh_flags(p)
    p.set_defaults(handler=ssh.shell, takes_command=True)

    p = commands.add_parser(
        "port-forward",
        help="forward localhost:LOCAL to port REMOTE of a running job (foreground)",
    )
    p.add_argument("job")
    p.add_argument("ports", metavar="LOCAL[:REMOTE]", help="REMOTE defaults to LOCAL")
    _ssh_flags(p)
    p.set_defaults(handler=ssh.port_forward)

    group = commands.add_parser("sweep", help="run a template over a grid or random set of values")
    sweep_commands = group.add_subparsers(dest="sweep_command", metavar="COMMAND")
    sweep_commands.required = True
    p = sweep_commands.add_parser("create", help="start a sweep described in a YAML file")
    p.add_argument("-f", "--file", required=True, help="the sweep: the API's body, in YAML")
    p.add_argument("--project", help="project id (proj_…) or slug; else the file's `project`")
    p.add_argument("--name")
    p.add_argument("--concurrency", type=int, help="trials running at once")
    p.add_argument("--max-cost", metavar="USD", help="stop the sweep at this total spend")
    p.add_argument("--idempotency-key", help="reuse to make a retried create return the same")
    _json_flag(p)
    p.set_defaults(handler=sweeps.create)
    p = sweep_commands.add_parser("show", help="a sweep's trials, their metric and the best")
    p.add_argument("sweep", help="swp_…")
    _json_flag(p)
    p.set_defaults(handler=sweeps.show)
    p = sweep_commands.add_parser("list", help="a project's sweeps, newest first")
    p.add_argument("--project", required=True, help="project id (proj_…) or slug")
    _json_flag(p)
    p.set_defaults(handler=sweeps.list_sweeps)
    p = sweep_commands.add_parser("cancel", help="stop a sweep: its running trials too")
    p.add_argument("sweep", help="swp_…")
    _json_flag(p)
    p.set_defaults(handler=sweeps.cancel)

    p = commands.add_parser("usage", help="billed usage per job in a window")
    p.add_argument("--from", dest="since", metavar="WHEN", help="ISO 8601; default 30 days ago")
    p.add_argument("--to", dest="until", metavar="WHEN", help="ISO 8601, exclusive; default now")
    p.add_argument("--resource-type", choices=["job", "service"])
    p.add_argument("--csv", action="store_true", help="the CSV report on stdout")
    p.add_argument("--limit", type=int, default=50)
    p.add_argument("--cursor")
    _json_flag(p)
    p.set_defaults(handler=usage.run)
    return parser


def split_command(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """Our arguments, and the job's command after the first `--`."""
    argv = list(argv)
    if "--" in argv:
        index = argv.index("--")
        return argv[:index], argv[index + 1 :]
    return argv, []


def parse(argv: Sequence[str]) -> argparse.Namespace:
    ours, command = split_command(argv)
    parser = build_parser()
    args = parser.parse_args(ours)
    if args.command is None:
        parser.print_help(sys.stderr)
        raise UsageError("Name a command.")
    if command and not getattr(args, "takes_command", False):
        raise UsageError("Only `jobs submit`, `jobs plan` and `ssh` take a command after `--`.")
    args.job_command = command
    return args


def run(argv: Sequence[str], *, transport: httpx.BaseTransport | None = None) -> int:
    """Run one command line; its exit code. `transport` lets tests answer in place of a
    server."""
    try:
        args = parse(argv)
        if args.handler is None:  # login: its own URL and key, no stored settings yet
            return login.run(args, transport=transport)
        client = Client(config.load(insecure=args.insecure), transport=transport)
        try:
            return args.handler(Context(client), args)
        finally:
            client.close()
    except CliError as error:
        output.render_error(error)
        return error.exit_code
    except config.ConfigError as error:
        output.render_error(UsageError(str(error)))
        return UsageError.exit_code
    except httpx.HTTPError as error:  # cut off while streaming a body
        problem = ConnectionProblem(f"The connection failed: {error}")
        output.render_error(problem)
        return problem.exit_code
    except OSError as error:  # a local file: unreadable input, an output folder missing
        if isinstance(error, BrokenPipeError):  # `trainyard jobs list | head`
            return 0
        where = f"{error.filename}: " if error.filename else ""
        output.render_error(CliError(f"{where}{error.strerror or error}"))
        return CliError.exit_code
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


def main() -> None:
    sys.exit(run(sys.argv[1:]))
