"""The README's quickstart and `make run`'s banner agree on how to reach the `trainyard`
command (installed into the clone's `.venv/bin`, not on PATH), and the CLI commands the
quickstart shows parse as written."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

from trainyard_cli.main import build_parser, split_command

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _quickstart() -> str:
    return README.split("## Your first job in five minutes", 1)[1].split("\n## ", 1)[0]


def test_make_runs_banner_names_the_cli_and_how_to_put_it_on_path():
    dry_run = subprocess.run(
        ["make", "--no-print-directory", "-n", "serve"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    [line] = [line for line in dry_run.splitlines() if "Command line:" in line]
    printed = subprocess.run(["sh", "-c", line], capture_output=True, text=True).stdout
    bin_dir = ROOT / ".venv" / "bin"
    assert printed.startswith(f"Command line: {bin_dir}/trainyard  (")
    assert f'export PATH="{bin_dir}:$PATH"' in printed
    assert ". .venv/bin/activate" in printed
    assert (bin_dir / "trainyard").exists()


def test_the_quickstart_puts_the_cli_on_path_and_its_commands_parse():
    text = _quickstart()
    assert 'export PATH="$PWD/.venv/bin:$PATH"' in text
    assert "Settings → API keys → Create key" in text
    commands = [
        shlex.split(line.split("#", 1)[0])[1:]
        for line in re.findall(r"^\s*(trainyard .+)$", text, flags=re.MULTILINE)
    ]
    assert [argv[:2] for argv in commands] == [
        ["login", "--url"],
        ["jobs", "submit"],
        ["logs", "-f"],
    ]
    for argv in commands:
        build_parser().parse_args(split_command(argv)[0])  # exits (SystemExit) on a usage error
    assert split_command(commands[1])[1] == ["python", "-c", "print('hello')"]
