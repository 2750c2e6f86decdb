"""`trainyard models push DIR ORG/NAME` and `trainyard models pull ORG/NAME [DIR]`: a folder to
and from the organization's hub, through the stock Hugging Face client pointed at
`<TRAINYARD_URL>/hf` with the Trainyard API key as its token.

`push` creates the repository when it is missing and commits the folder in one commit
(files the revision already holds unchanged are not sent again); `--dataset` pushes a
dataset repository instead. `pull` downloads a revision into DIR (default: NAME).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from trainyard_cli import output
from trainyard_cli.client import ApiError, CliError, ConnectionProblem, UsageError
from trainyard_cli.commands import Context


def _hub(ctx: Context):
    """The huggingface_hub module, configured for this control plane. HF_ENDPOINT is read
    when the module is first imported, so it is set before that."""
    settings = ctx.client.settings
    os.environ["HF_ENDPOINT"] = f"{settings.url.rstrip('/')}/hf"
    os.environ["HF_TOKEN"] = settings.api_key
    import huggingface_hub

    return huggingface_hub


def _repo_type(args: argparse.Namespace) -> str:
    return "dataset" if args.dataset else "model"


def _check_repo_id(repo_id: str) -> str:
    parts = repo_id.split("/")
    if len(parts) != 2 or not all(parts):
        raise UsageError(f"Name the repository as ORG/NAME, not {repo_id!r}.")
    return repo_id


def _hub_errors(call):
    from huggingface_hub.errors import (
        HfHubHTTPError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    try:
        return call()
    except RepositoryNotFoundError as error:
        raise ApiError(404, "No such repository in your organization.") from error
    except RevisionNotFoundError as error:
        raise ApiError(404, "No such branch, tag or commit in the repository.") from error
    except HfHubHTTPError as error:
        status = error.response.status_code if error.response is not None else 500
        said = error.server_message or str(error).splitlines()[0]
        raise ApiError(status, f"The hub answered {status}: {said}") from error
    except OSError as error:
        if isinstance(error, FileNotFoundError | PermissionError):
            raise
        raise ConnectionProblem(f"The connection failed: {error}") from error


def push(ctx: Context, args: argparse.Namespace) -> int:
    folder = Path(args.dir)
    if not folder.is_dir():
        raise CliError(f"{folder}: not a folder.")
    repo_id = _check_repo_id(args.repo)
    hub = _hub(ctx)
    api = hub.HfApi()
    repo_type = _repo_type(args)

    def send():
        api.create_repo(repo_id, repo_type=repo_type, exist_ok=True)
        return api.upload_folder(
            folder_path=str(folder),
            repo_id=repo_id,
            repo_type=repo_type,
            revision=args.revision,
            commit_message=args.message or f"Upload {folder.name}",
        )

    commit = _hub_errors(send)
    if args.json:
        output.print_json({"repo": repo_id, "commit": commit.oid, "url": commit.commit_url})
        return 0
    output.out().print(commit.oid, markup=False, highlight=False)
    output.info(f"Pushed {folder} to {repo_id} ({args.revision or 'main'}): {commit.commit_url}")
    return 0


def pull(ctx: Context, args: argparse.Namespace) -> int:
    repo_id = _check_repo_id(args.repo)
    target = Path(args.dir or repo_id.split("/")[1])
    hub = _hub(ctx)
    where = _hub_errors(
        lambda: hub.snapshot_download(
            repo_id, repo_type=_repo_type(args), revision=args.revision, local_dir=str(target)
        )
    )
    if args.json:
        output.print_json({"repo": repo_id, "dir": str(where)})
        return 0
    output.out().print(str(where), markup=False, highlight=False)
    output.info(f"Pulled {repo_id} ({args.revision or 'main'}) into {where}.")
    return 0
