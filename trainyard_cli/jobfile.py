"""Reading a job file (`trainyard apply -f job.yaml`) with the line of every value, so an
error the API names by its dotted `param` (`compute.gpu_count`, `container.env.LR`) can be
shown where it is in the file: `job.yaml:12: compute.gpu_count: …`.

The file is YAML (JSON is YAML too): the body of the job's create endpoint, plus `kind:`
(`container`, the default, or `finetune`) and, for a fine-tune, `project:`. Only the shape
is checked here (a mapping at the top, no duplicate keys, no anchors or aliases); every field
is judged by the server, with the same serializers as the API, so the two never disagree.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import Any

import yaml

from trainyard_cli.client import CliError

KINDS = ("container", "finetune")
_INDEX = re.compile(r"\[(\d+)\]")


class JobFileError(CliError):
    """The file itself is wrong, or the API refused a field: one line naming file and line."""

    exit_code = 2


@dataclass
class JobFile:
    path: Path
    text: str
    data: dict[str, Any]
    # Dotted path (`container.command.0`) → 1-based line of its value (of the key, for a
    # mapping entry).
    lines: dict[str, int] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def kind(self) -> str:
        return self.data.get("kind") or "container"

    def line_of(self, param: str | None) -> int:
        """The line an API `param` points at: its own, else its nearest parent's, else 1."""
        if not param:
            return 1
        parts = _INDEX.sub(r".\1", param).split(".")
        while parts:
            line = self.lines.get(".".join(parts))
            if line is not None:
                return line
            parts.pop()
        return 1

    def error(self, param: str | None, message: str) -> JobFileError:
        where = f"{param}: " if param else ""
        return JobFileError(f"{self.name}:{self.line_of(param)}: {where}{message}")

    def body(self) -> dict[str, Any]:
        """The API body: the file less `kind` and `project` (the CLI's to place), plus the
        file itself (`job_file`), which the job keeps and its page shows."""
        body = {key: value for key, value in self.data.items() if key not in ("kind", "project")}
        body["job_file"] = {"name": self.name, "content": self.text}
        return body


def load(path: str) -> JobFile:
    """Read and parse the file; JobFileError (naming the line) for anything that is not a
    mapping of plain values, or has a `kind` we do not know."""
    file_path = Path(path).expanduser()
    text = file_path.read_text(encoding="utf-8")
    job_file = JobFile(path=file_path, text=text, data={})
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        line = mark.line + 1 if mark else 1
        raise JobFileError(f"{job_file.name}:{line}: not valid YAML: {error.problem}") from None
    if not isinstance(node, yaml.MappingNode):
        line = node.start_mark.line + 1 if node is not None else 1
        raise JobFileError(f"{job_file.name}:{line}: a job file is a mapping of fields")
    job_file.data = _value(node, "", job_file, set())
    kind = job_file.data.get("kind", "container")
    if kind not in KINDS:
        raise job_file.error("kind", f"{kind!r} is not a kind of job; use {' or '.join(KINDS)}.")
    if kind == "finetune" and not job_file.data.get("project"):
        raise job_file.error("kind", "A fine-tune names its project (`project:`, id or name).")
    return job_file


def _value(node: yaml.Node, path: str, job_file: JobFile, seen: set[int]) -> Any:
    if id(node) in seen:  # an alias: the same node a second time
        raise job_file.error(path or None, "anchors and aliases (&, *) are not supported")
    seen.add(id(node))
    if path:
        job_file.lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        result: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise JobFileError(
                    f"{job_file.name}:{key_node.start_mark.line + 1}: keys are plain names"
                )
            key = str(key_node.value)
            child = f"{path}.{key}" if path else key
            if key in result:
                raise JobFileError(
                    f"{job_file.name}:{key_node.start_mark.line + 1}: {child}: given twice"
                )
            job_file.lines[child] = key_node.start_mark.line + 1
            result[key] = _value(value_node, child, job_file, seen)
        return result
    if isinstance(node, yaml.SequenceNode):
        return [
            _value(item, f"{path}.{index}", job_file, seen) for index, item in enumerate(node.value)
        ]
    value = yaml.constructor.SafeConstructor().construct_object(node, deep=True)
    if isinstance(value, date | datetime):  # YAML reads 2026-01-01 as a date; JSON has none
        return value.isoformat()
    return value
