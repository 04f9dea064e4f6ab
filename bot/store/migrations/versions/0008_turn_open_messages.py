"""Every message a turn opened and has not closed: `turns.open_messages` replaces `stream_ts`.

A long answer goes on in a second (or third) stream message; only the first was stored, so a
crash left the live one open. `open_messages` is a JSON list of `ts`: a message joins it when
the turn opens it and leaves it once closed, and whoever takes over a dead turn closes those
left. A `stream_ts` stored before this revision is carried over as the turn's one message.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("turns") as batch:
        batch.add_column(
            sa.Column("open_messages", sa.String(), nullable=False, server_default="[]")
        )
    op.execute(
        "UPDATE turns SET open_messages = '[\"' || stream_ts || '\"]' WHERE stream_ts IS NOT NULL"
    )
    with op.batch_alter_table("turns") as batch:
        batch.drop_column("stream_ts")


def downgrade() -> None:
    with op.batch_alter_table("turns") as batch:
        batch.add_column(sa.Column("stream_ts", sa.String(), nullable=True))
    # The first message still open, as the one `stream_ts` held.
    bind = op.get_bind()
    rows = bind.execute(sa.text("SELECT turn_id, open_messages FROM turns")).all()
    for turn_id, open_messages in rows:
        first = next(iter(json.loads(str(open_messages))), None)
        if first is not None:
            bind.execute(
                sa.text("UPDATE turns SET stream_ts = :ts WHERE turn_id = :turn_id"),
                {"ts": first, "turn_id": turn_id},
            )
    with op.batch_alter_table("turns") as batch:
        batch.drop_column("open_messages")
