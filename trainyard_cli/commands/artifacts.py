"""`trainyard artifacts download JOB ARTIFACT [-o FILE]`: stream an artifact to a file with a
progress bar and check it against the server's X-Trainyard-SHA256. The bytes go to a
temporary file beside the target, renamed into place only once the digest matches, so a
cut or corrupted download never leaves a file that looks whole."""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import tempfile
from pathlib import Path

import httpx

from trainyard_cli import output
from trainyard_cli.client import ConnectionProblem
from trainyard_cli.commands import Context, seg
from trainyard_cli.commands.jobs import JOBS
from trainyard_cli.progress import transfer

SHA256_HEADER = "X-Trainyard-SHA256"
FILENAME = re.compile(r'filename="?([^";]+)"?')


def _filename(response: httpx.Response, fallback: str) -> str:
    match = FILENAME.search(response.headers.get("Content-Disposition", ""))
    # Only a plain name: a server cannot make us write outside the current directory.
    name = os.path.basename(match.group(1)) if match else ""
    return name or fallback


def list_artifacts(ctx: Context, args: argparse.Namespace) -> int:
    page = ctx.client.get_json(f"{JOBS}/{seg(args.job)}/artifacts")
    if args.json:
        output.print_json(page)
        return 0
    output.table(
        None,
        ["id", "kind", "step", "attempt", "size", "created"],
        ([a["id"], a["kind"], a["step"], a["attempt"], a["size_bytes"],
          output.when(a["created_at"])] for a in page["data"]),
    )  # fmt: skip
    return 0


def download(ctx: Context, args: argparse.Namespace) -> int:
    path = f"{JOBS}/{seg(args.job)}/artifacts/{seg(args.artifact)}/download"
    digest = hashlib.sha256()
    with ctx.client.stream("GET", path) as response:
        target = Path(args.output or _filename(response, f"{args.job}-{args.artifact}.tar.gz"))
        expected = response.headers.get(SHA256_HEADER, "").lower()
        total = (
            int(response.headers["Content-Length"])
            if "Content-Length" in response.headers
            else None
        )
        fd, tmp = tempfile.mkstemp(dir=target.parent.resolve(), prefix=f".{target.name}.")
        try:
            with (
                os.fdopen(fd, "wb") as out,
                transfer(f"Downloading {target.name}", total) as (
                    progress,
                    task,
                ),
            ):
                for chunk in response.iter_bytes(256 * 1024):
                    out.write(chunk)
                    digest.update(chunk)
                    progress.advance(task, len(chunk))
            if expected and digest.hexdigest() != expected:
                raise ConnectionProblem(
                    f"The download's sha256 {digest.hexdigest()} is not the server's {expected}; "
                    "nothing was saved."
                )
            os.chmod(tmp, 0o644 & ~_umask())
            os.replace(tmp, target)
        except httpx.HTTPError as exc:
            raise ConnectionProblem(f"The download was cut off: {exc}") from exc
        finally:
            Path(tmp).unlink(missing_ok=True)
    if args.json:
        output.print_json(
            {"path": str(target), "sha256": digest.hexdigest(), "verified": bool(expected)}
        )
    else:
        check = "verified" if expected else "not checked: the server sent no digest"
        output.info(f"Saved {target} (sha256 {digest.hexdigest()}, {check}).")
    return 0


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
