"""A turn's state as stored: a leaf value type that the store and the agent both use."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class TurnState(StrEnum):
    QUEUED = "queued"  # accepted and stored, waiting for its thread or a free slot
    RUNNING = "running"  # on the replica that owns its lease (at most one per thread)
    AWAITING_APPROVAL = "awaiting_approval"  # ended at an approval card
    DONE = "done"
    INTERRUPTED = "interrupted"  # a person's stop or newer message, a shutdown, or a crash
    FAILED = "failed"

    @property
    def live(self) -> bool:
        """Owned by a replica (and its lease) until it ends."""
        return self in (TurnState.QUEUED, TurnState.RUNNING)


@dataclass(frozen=True)
class OrphanTurn:
    """A turn whose replica died (its lease expired), now claimed by this one to close."""

    turn_id: str
    session_id: int
    state: TurnState
    asker: str
    team_id: str
    channel_id: str
    thread_ts: str
    stream_ts: str | None


@dataclass(frozen=True)
class OrphanDelivery:
    """A Slack delivery acknowledged by a replica that died before handling it."""

    key: str
    kind: str
    body_json: str
