"""Hooks found by dotted path: how a lower app has the apps above it act on something that
happened, without importing them and without Django signals between our apps (the job kinds'
registry, `apps.jobs.kinds`, works the same way). Each app keeps its own list of paths beside
the code that calls them; the apps above are named there as strings."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from django.utils.module_loading import import_string

logger = logging.getLogger(__name__)


def call_hooks(paths: Iterable[str], what: str, **kwargs: object) -> None:
    """Call each hook with `kwargs`; one that raises is logged (naming `what`) and does not
    stop the others or the caller. Hooks own their retries and must be idempotent."""
    for path in paths:
        try:
            import_string(path)(**kwargs)
        except Exception:
            logger.exception("%s: hook %s failed", what, path)
