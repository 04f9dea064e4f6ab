"""Commits and SQL statements counted on every engine of this process (the bot's), like
bench/bot_process.py: what the store's work costs, seen from SQLAlchemy's events."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine


class Calls:
    def __init__(self) -> None:
        self.count = 0

    def __call__(self, *_args: Any) -> None:
        self.count += 1


@contextmanager
def counting_commits() -> Iterator[Calls]:
    """Every commit on any engine of this process (the bot's), like bench/bot_process.py."""
    with counting(Engine, "commit") as commits:
        yield commits


class Statements(Calls):
    """SQL statements but SQLite's `BEGIN IMMEDIATE`, which opens each write transaction
    (a commit is counted on its own)."""

    def __call__(self, *args: Any) -> None:
        statement = args[2]
        if not statement.startswith("BEGIN"):
            self.count += 1


@contextmanager
def counting_statements() -> Iterator[Calls]:
    """Every SQL statement on any engine of this process, like bench/bot_process.py."""
    with counting(Engine, "before_cursor_execute", Statements()) as statements:
        yield statements


@contextmanager
def counting(target: Any, name: str, calls: Calls | None = None) -> Iterator[Calls]:
    calls = calls or Calls()
    event.listen(target, name, calls)
    try:
        yield calls
    finally:
        event.remove(target, name, calls)
