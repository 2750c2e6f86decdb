"""A repository's card metadata: the YAML block at the top of its README.md, as the Hugging
Face hub reports it (`cardData` in repo info; its `tags` and `library_name`
also at the top level, where the client reads them)."""

from __future__ import annotations

from contextlib import closing
from typing import Any

import yaml

from apps.core.stored_files import StoredFileMissing
from apps.hub import blobs
from apps.hub.models import HubFile

README = "README.md"
MAX_CARD_BYTES = 64 * 1024  # a longer README's metadata is not read


def card_data(files: list[HubFile]) -> dict[str, Any] | None:
    """The metadata of the README among `files` (a commit's tree), or None when it has none,
    or none that parses to a mapping."""
    readme = next((item for item in files if item.path == README), None)
    if readme is None or readme.blob.size_bytes > MAX_CARD_BYTES:
        return None
    try:
        with closing(blobs.open_blob(readme.blob)) as stream:
            text = stream.read(MAX_CARD_BYTES).decode("utf-8", errors="replace")
    except StoredFileMissing:
        return None
    if not text.startswith("---"):
        return None
    block, ended, _ = text[3:].partition("\n---")
    if not ended:
        return None
    try:
        data = yaml.safe_load(block)
    except yaml.YAMLError:
        return None
    return data if isinstance(data, dict) else None
