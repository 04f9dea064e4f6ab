"""The schema belongs to Alembic: `kelpie run` upgrades the database at start.

A database made by a release before migrations existed (tables, no `alembic_version`) is
stamped with the first revision, which is exactly that schema, and upgraded from there. A
database whose revision this code does not know was written by a newer kelpie: refuse.
"""

from __future__ import annotations

import logging
from pathlib import Path

from alembic.command import stamp, upgrade
from alembic.config import Config as AlembicConfig
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, inspect, text

from bot.errors import StoreError

log = logging.getLogger(__name__)
# Alembic narrates every step at INFO; one line of our own says what changed.
logging.getLogger("alembic").setLevel(logging.WARNING)

MIGRATIONS = Path(__file__).parent / "migrations"
# The schema as released before migrations existed.
BASELINE = "0001"
# The advisory lock migrations run under on PostgreSQL (any fixed 64-bit number; "kelpie").
MIGRATION_LOCK = 0x6B656C706965


def alembic_config(connection: Connection | None = None) -> AlembicConfig:
    config = AlembicConfig()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


def current_revision(connection: Connection) -> str | None:
    return MigrationContext.configure(connection).get_current_revision()


def refuse_newer(connection: Connection) -> str | None:
    """The database's revision; `StoreError` if a newer kelpie wrote it."""
    current = current_revision(connection)
    scripts = ScriptDirectory.from_config(alembic_config())
    known = {script.revision for script in scripts.walk_revisions()}
    if current is not None and current not in known:
        raise StoreError(
            f"the database's schema (revision {current}) is newer than this kelpie; "
            "run the newer kelpie or restore a backup"
        )
    return current


def bring_up_to_date(connection: Connection) -> None:
    """Upgrade to the head revision (run with `AsyncConnection.run_sync`, in a transaction).
    On PostgreSQL, replicas starting together take turns: a transaction-scoped advisory
    lock, so the second one finds the schema up to date instead of racing the first."""
    if connection.dialect.name == "postgresql":
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK})
    config = alembic_config(connection)
    current = refuse_newer(connection)
    if current is None and inspect(connection).has_table("sessions"):
        stamp(config, BASELINE)
        current = BASELINE
    head = head_revision()
    if current != head:
        upgrade(config, "head")
        log.info("database schema upgraded from %s to %s", current or "empty", head)
