"""Alembic's environment: kelpie hands it an open connection (see `bot.store.schema`)."""

from __future__ import annotations

from alembic import context
from sqlmodel import SQLModel

from bot.store import tables  # noqa: F401  (registers the tables on SQLModel.metadata)

connection = context.config.attributes["connection"]
# Batch mode: SQLite alters a table by copying it, which Alembic does for us.
context.configure(
    connection=connection,
    target_metadata=SQLModel.metadata,
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
