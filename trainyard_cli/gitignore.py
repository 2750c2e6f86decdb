"""A small `.gitignore` matcher, so `jobs submit --workdir` ships what git would commit.

Covers what real projects' ignore files use (gitignore(5)):
- blank lines and `#` comments (`\\#` is a literal `#`); trailing spaces dropped unless
  escaped;
- `!pattern` re-includes (`\\!` is a literal `!`); the last matching pattern wins, and a file
  inside an ignored directory cannot be re-included (the directory is never entered);
- `dir/` matches directories only;
- a pattern with a slash at its start or middle is anchored to the ignore file's directory;
  one without matches at any depth;
- `*` and `?` never cross `/`; `[a-z]`, `[!a-z]` classes; `**/x`, `x/**`, `a/**/b`.
Ignore files in subdirectories apply below them, after (so over) their parents' patterns.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Pattern:
    regex: re.Pattern[str]
    negated: bool
    dir_only: bool
    base: str  # the directory of the ignore file, relative to the root ("" for the root)
    source: str

    def matches(self, rel_path: str, is_dir: bool) -> bool:
        if self.dir_only and not is_dir:
            return False
        if self.base:
            prefix = self.base + "/"
            if not rel_path.startswith(prefix):
                return False
            rel_path = rel_path[len(prefix) :]
        return self.regex.fullmatch(rel_path) is not None


def _strip_trailing_spaces(line: str) -> str:
    stripped = line.rstrip(" ")
    # `foo\ ` keeps one escaped space.
    if stripped.endswith("\\") and len(stripped) < len(line):
        return stripped[:-1] + " "
    return stripped


def _translate_segment(segment: str) -> str:
    """A regex for one path segment's glob: `*`, `?`, `[...]`, and `\\x` escapes."""
    out, i = [], 0
    while i < len(segment):
        char = segment[i]
        if char == "\\" and i + 1 < len(segment):
            out.append(re.escape(segment[i + 1]))
            i += 2
            continue
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[":
            end = segment.find("]", i + 2 if segment[i + 1 : i + 2] in ("!", "^", "]") else i + 1)
            if end == -1:
                out.append(re.escape(char))
            else:
                body = segment[i + 1 : end]
                if body[:1] in ("!", "^"):
                    body = "^" + body[1:]
                out.append("[" + body.replace("\\", "\\\\").replace("/", "") + "]")
                i = end
        else:
            out.append(re.escape(char))
        i += 1
    return "".join(out)


def _translate(pattern: str) -> str:
    """A regex for a whole (already anchored, slash-separated) pattern."""
    segments = pattern.split("/")
    parts: list[str] = []
    for index, segment in enumerate(segments):
        last = index == len(segments) - 1
        if segment == "**":
            # `a/**` is everything inside a; `**/b` and `a/**/b` span zero or more folders.
            parts.append(".*" if last else "(?:.*/)?")
        else:
            parts.append(_translate_segment(segment) + ("" if last else "/"))
    return "".join(parts)


def parse_line(line: str, base: str = "") -> Pattern | None:
    """One ignore-file line as a Pattern, or None for blanks and comments."""
    line = _strip_trailing_spaces(line.rstrip("\r\n"))
    if not line or line.startswith("#"):
        return None
    source = line
    negated = line.startswith("!")
    if negated or line.startswith(("\\!", "\\#")):  # a backslash makes a leading ! or # literal
        line = line[1:]
    dir_only = line.endswith("/")
    line = line.rstrip("/")
    if not line:
        return None
    anchored = "/" in line
    line = line.lstrip("/")
    if not anchored and not line.startswith("**"):
        line = "**/" + line
    return Pattern(
        regex=re.compile(_translate(line), re.DOTALL),
        negated=negated,
        dir_only=dir_only,
        base=base.strip("/"),
        source=source,
    )


class Matcher:
    """Patterns in precedence order (later wins), from one or more ignore files."""

    def __init__(self, patterns: list[Pattern] | None = None) -> None:
        self.patterns: list[Pattern] = list(patterns or [])

    def add_lines(self, lines: str | list[str], base: str = "") -> None:
        if isinstance(lines, str):
            lines = lines.splitlines()
        for line in lines:
            if (pattern := parse_line(line, base)) is not None:
                self.patterns.append(pattern)

    def child(self, lines: str, base: str) -> Matcher:
        """This matcher plus a subdirectory's ignore file (which takes precedence)."""
        matcher = Matcher(self.patterns)
        matcher.add_lines(lines, base)
        return matcher

    def ignored(self, rel_path: str, is_dir: bool = False) -> bool:
        """Whether this path itself is ignored (its parents are not looked at: the walk
        never enters an ignored directory)."""
        verdict = False
        for pattern in self.patterns:
            if pattern.negated == verdict and pattern.matches(rel_path, is_dir):
                verdict = not pattern.negated
        return verdict

    def path_ignored(self, rel_path: str, is_dir: bool = False) -> bool:
        """Whether the path is ignored, itself or through an ignored parent directory."""
        parts = rel_path.strip("/").split("/")
        for depth in range(1, len(parts)):
            if self.ignored("/".join(parts[:depth]), is_dir=True):
                return True
        return self.ignored("/".join(parts), is_dir)
