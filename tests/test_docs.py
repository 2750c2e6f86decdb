"""The documentation a newcomer reads first stays true to the tree: docs/architecture.md
names every app folder, and no relative link in README.md or docs/*.md leads nowhere."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# [text](target) and ![alt](target); a target may follow a line break inside the text.
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _relative_links(document: Path) -> list[str]:
    targets = LINK.findall(document.read_text())
    return [t for t in targets if not re.match(r"^[a-z][a-z0-9+.-]*:|^#", t)]


def test_the_architecture_map_names_every_app_folder():
    text = (ROOT / "docs" / "architecture.md").read_text()
    apps = sorted(p.name for p in (ROOT / "apps").iterdir() if (p / "__init__.py").exists())
    missing = [name for name in apps if not re.search(rf"(?<![\w/]){name}/", text)]
    assert missing == [], "docs/architecture.md does not name " + ", ".join(
        f"apps/{name}/" for name in missing
    )


def test_every_relative_link_in_the_readme_and_docs_leads_to_a_file():
    broken = [
        f"{document.relative_to(ROOT)}: {target}"
        for document in _documents()
        for target in _relative_links(document)
        if not (document.parent / target.split("#", 1)[0]).exists()
    ]
    assert broken == []


def test_the_readme_stays_a_front_door():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 300
