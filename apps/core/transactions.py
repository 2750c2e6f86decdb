"""Work that must wait for a commit, and blocks that join the caller's transaction."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

from django.db import connection, transaction


def after_commit(func: Callable, /, *args, **kwargs) -> None:
    """Run `func(*args, **kwargs)` once the current transaction commits (at once outside
    one). An exception is logged, never raised into the write that already committed.

    A named closure, not functools.partial: Django's robust on_commit logs a failing
    callback by its __qualname__, which a partial lacks (the AttributeError would escape)."""

    def callback() -> None:
        func(*args, **kwargs)

    callback.__qualname__ = getattr(func, "__qualname__", "after_commit")
    transaction.on_commit(callback, robust=True)


def atomic_joining() -> AbstractContextManager:
    """`transaction.atomic()` when no transaction is open; inside one, nothing: the block
    joins the caller's transaction without a savepoint (two round trips saved per write on
    a hot path such as a job's state change). An error inside then leaves the whole
    transaction to roll back, which is what a caller that lets errors propagate does anyway;
    a caller that must survive an error of the block opens its own `atomic()` around it."""
    return nullcontext() if connection.in_atomic_block else transaction.atomic()
