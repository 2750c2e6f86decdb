"""What the CLI writes: rich tables for people, plain JSON for scripts, and errors on stderr.

With `--json`, stdout carries the API's JSON and nothing else (no colour, no wrapping), so
`trainyard jobs list --json | jq` always parses; messages for people go to stderr.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from trainyard_cli import formats
from trainyard_cli.client import ApiError, CliError

# Consoles are looked up on each call (not kept at import) so tests that swap
# sys.stdout / sys.stderr see the output.


def out() -> Console:
    return Console(file=sys.stdout, highlight=False, soft_wrap=False)


def err() -> Console:
    return Console(file=sys.stderr, highlight=False, soft_wrap=True)


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2) + "\n")
    sys.stdout.flush()


def print_json_line(data: Any, *, flush: bool = True) -> None:
    sys.stdout.write(json.dumps(data, separators=(",", ":")) + "\n")
    if flush:
        sys.stdout.flush()


def info(message: str) -> None:
    """A note for people, on stderr (never mixed into output a script may parse)."""
    err().print(message, markup=False)


def table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    grid = Table(title=title, title_justify="left", header_style="bold")
    for index, column in enumerate(columns):
        # The first column is an id: never folded, so it can be copied whole.
        grid.add_column(column, no_wrap=index == 0, overflow="fold")
    for row in rows:  # as plain text: a value's "[…]" is never read as rich's markup
        grid.add_row(*(Text(text(value)) for value in row))
    out().print(grid)


def fields(pairs: Iterable[tuple[str, Any]]) -> None:
    """A two-column table of one object's fields."""
    grid = Table(show_header=False, box=None, pad_edge=False)
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    for name, value in pairs:
        grid.add_row(name, Text(text(value)))
    out().print(grid)


def text(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):  # a metric: 4 significant digits, as on the job page
        return formats.sig(value)
    if isinstance(value, dict | list):
        return json.dumps(value)
    return str(value)


def usd(value: Any) -> str:
    """API dollars as pages show them (`$0.002`, `$12.35`)."""
    return formats.usd(value)


def when(value: str | None) -> str:
    """An API time, shorter: to the second, without the zone's `+00:00` noise."""
    if not value:
        return "-"
    return value.replace("T", " ")[:19]


def render_error(error: CliError) -> None:
    """One error line on stderr: the API's message, the parameter it names and its type."""
    message = error.message
    if isinstance(error, ApiError):
        details = [f"HTTP {error.status}"]
        if error.error_type:
            details.insert(0, error.error_type)
        if error.param:
            message = f"{message} (param: {error.param})"
        message = f"{message} [{', '.join(details)}]"
    err().print(f"[bold red]Error:[/] {escape(message)}")
