"""Work that must wait for a commit."""

from __future__ import annotations

from collections.abc import Callable

from django.db import transaction


def after_commit(func: Callable, /, *args, **kwargs) -> None:
    """Run `func(*args, **kwargs)` once the current transaction commits (at once outside
    one). An exception is logged, never raised into the write that already committed.

    A named closure, not functools.partial: Django's robust on_commit logs a failing
    callback by its __qualname__, which a partial lacks (the AttributeError would escape)."""

    def callback() -> None:
        func(*args, **kwargs)

    callback.__qualname__ = getattr(func, "__qualname__", "after_commit")
    transaction.on_commit(callback, robust=True)
