"""The audit chain: one hash chain per store over every audit row (tool audits, write audits
and retention's checkpoints), so that a row changed, deleted or reordered afterwards shows.

Each chained row carries its place (`chain_seq`, 1, 2, 3 … across the three tables), the
hash of the row before it (`prev_hash`) and its own hash (`row_hash`): SHA-256 over the
previous hash, the table and what the row records. Appending locks the one head row
(`audit_chain_head`) first, in the transaction that inserts the rows: on PostgreSQL a row
lock that a second replica's append waits for, on SQLite the database's write lock. So
replicas append one after another and the chain never forks.

Retention removes the start of the chain only, through a place P, after checking that
part, and appends a checkpoint row naming P and the hash of row P: the rows after P verify
from there. The hashes are not keyed: someone able to rewrite the whole chain and its head
could hide an edit from the chain alone. So the head's place and hash are anchors to keep
elsewhere: `kelpie audit verify` prints them, a running kelpie logs them at every retention
pass (into the log store, out of the database's reach), and `verify --anchor SEQ:HASH`
checks the chain still holds them: a rewritten chain no longer does.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import Connection, delete, func, insert, select, update
from sqlmodel import Session, SQLModel, col

from bot.store.tables import (
    AuditChainHeadRow,
    AuditCheckpointRow,
    ToolAuditRow,
    WriteAuditRow,
    aware,
    utcnow,
)
from bot.store.writer import Op

GENESIS = "0" * 64

# What each chained table's hash covers (besides the previous hash and the table's name).
RECORDED: dict[str, tuple[str, ...]] = {
    "tool_audit": (
        "session_id",
        "turn_id",
        "tool_call_id",
        "tool",
        "arguments_json",
        "stage",
        "decision",
        "reason",
        "slack_user",
        "created_at",
    ),
    "write_audit": (
        "approval_id",
        "phase",
        "tool",
        "target",
        "target_uid",
        "requested_by",
        "approved_by",
        "preview",
        "result",
        "ok",
        "created_at",
    ),
    "audit_checkpoints": ("pruned_through", "pruned_rows", "anchor_hash", "created_at"),
}
MODELS: dict[str, type[SQLModel]] = {
    "tool_audit": ToolAuditRow,
    "write_audit": WriteAuditRow,
    "audit_checkpoints": AuditCheckpointRow,
}
NAMES = {
    "tool_audit": "tool audit",
    "write_audit": "write audit",
    "audit_checkpoints": "checkpoint",
}


def _canonical(value: Any) -> Any:
    if isinstance(value, datetime):
        return aware(value).astimezone(UTC).isoformat(timespec="microseconds")
    return value


def record_hash(table: str, prev_hash: str, values: Mapping[str, Any]) -> str:
    """The hash of one row: its table, the previous row's hash and what it records."""
    record = {field: _canonical(values[field]) for field in RECORDED[table]}
    document = {"prev": prev_hash, "record": record, "table": table}
    encoded = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(encoded.encode()).hexdigest()


# --- Appending ---


def lock_head(connection: Connection) -> tuple[int, str]:
    """The head's place and hash, locked until the transaction ends: a row lock on
    PostgreSQL (FOR UPDATE); SQLite's writer holds the database's write lock from its
    BEGIN IMMEDIATE (bot/store/db.py), so one read is the whole step there."""
    head = AuditChainHeadRow.__table__  # type: ignore[attr-defined]
    locked = select(head.c.seq, head.c.hash).where(head.c.id == 1).with_for_update()
    row = connection.execute(locked).first()
    if row is not None:
        return int(row.seq), str(row.hash)
    # The head row is gone (deleted by hand): start again from the last chained row;
    # `kelpie audit verify` still judges the rows themselves.
    last = _last_link(connection)
    seq, hashed = last if last is not None else (0, GENESIS)
    connection.execute(insert(head).values(id=1, seq=seq, hash=hashed))
    return seq, hashed


def _last_link(connection: Connection) -> tuple[int, str] | None:
    best: tuple[int, str] | None = None
    for model in MODELS.values():
        table = model.__table__  # type: ignore[attr-defined]
        row = connection.execute(
            select(table.c.chain_seq, table.c.row_hash)
            .where(table.c.chain_seq.is_not(None))
            .order_by(table.c.chain_seq.desc())
            .limit(1)
        ).first()
        if row is not None and (best is None or row.chain_seq > best[0]):
            best = (int(row.chain_seq), str(row.row_hash))
    return best


def link_rows(
    connection: Connection, table: str, values: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """`values` placed at the end of the chain (copies with chain_seq, prev_hash and
    row_hash), the head locked and moved past them; the caller inserts them in this
    transaction."""
    seq, prev = lock_head(connection)
    linked: list[dict[str, Any]] = []
    for value in values:
        seq += 1
        row_hash = record_hash(table, prev, value)
        linked.append({**value, "chain_seq": seq, "prev_hash": prev, "row_hash": row_hash})
        prev = row_hash
    head = AuditChainHeadRow.__table__  # type: ignore[attr-defined]
    connection.execute(update(head).where(head.c.id == 1).values(seq=seq, hash=prev))
    return linked


def appending(model: type[SQLModel], values: list[dict[str, Any]]) -> Op[None]:
    """An op appending audit rows (plain values, all of one table) to the chain: one
    executemany, placed and hashed inside the writer's transaction."""
    table = model.__tablename__
    statement = insert(model.__table__)  # type: ignore[attr-defined]

    def op(session: Session) -> None:
        connection = session.connection()
        connection.execute(statement, link_rows(connection, str(table), values))

    return op


# --- Verifying ---


class Break(StrEnum):
    CHANGED = "changed"
    DELETED = "deleted"
    REORDERED = "reordered"
    OUTSIDE = "added outside kelpie"
    REWRITTEN = "rewritten"


@dataclass(frozen=True)
class Anchor:
    """A chain row's place and hash noted outside the database (`SEQ:HASH`, as verify and
    the log print them)."""

    seq: int
    hash: str

    @classmethod
    def parse(cls, text: str) -> Anchor:
        seq, _, hashed = text.strip().partition(":")
        if not seq.isdigit() or int(seq) < 1 or len(hashed) != 64:
            raise ValueError(f"{text!r} is not an anchor: SEQ:HASH, as verify prints the head")
        return cls(int(seq), hashed.lower())

    def __str__(self) -> str:
        return f"{self.seq}:{self.hash}"


@dataclass(frozen=True)
class Link:
    """One chained (or unchained) audit row as the database holds it."""

    table: str
    row_id: int
    seq: int | None
    prev_hash: str | None
    row_hash: str | None
    values: Mapping[str, Any]

    @property
    def name(self) -> str:
        where = f" (chain row {self.seq})" if self.seq is not None else ""
        return f"{NAMES[self.table]} row {self.row_id}{where}"


@dataclass(frozen=True)
class Problem:
    kind: Break
    sentence: str
    row: Link | None = None


@dataclass(frozen=True)
class Verdict:
    rows: int
    head: Anchor
    problem: Problem | None = None
    pruned_through: int = 0
    anchors_checked: int = 0

    @property
    def intact(self) -> bool:
        return self.problem is None

    def line(self) -> str:
        if self.problem is not None:
            return f"{self.problem.kind}: {self.problem.sentence}"
        since = f", pruned through chain row {self.pruned_through}" if self.pruned_through else ""
        anchored = f", {self.anchors_checked} anchors held" if self.anchors_checked else ""
        return f"intact: {self.rows} rows (head {self.head}{since}{anchored})"


def load_links(
    connection: Connection, low: int | None = None, high: int | None = None
) -> list[Link]:
    """Every audit row (or those placed from `low` through `high`), in chain order; rows
    not on the chain last."""
    links: list[Link] = []
    for table, model in MODELS.items():
        columns = model.__table__.c  # type: ignore[attr-defined]
        # Only what the chain needs: the migration that places old rows runs this on a
        # schema that may lack columns added later.
        names = ("id", "chain_seq", "prev_hash", "row_hash", *RECORDED[table])
        query = select(*(columns[name] for name in names))
        if low is not None:
            query = query.where(columns.chain_seq >= low)
        if high is not None:
            query = query.where(columns.chain_seq <= high)
        for row in connection.execute(query).mappings():
            seq, prev, own = row["chain_seq"], row["prev_hash"], row["row_hash"]
            links.append(Link(table, row["id"], seq, prev, own, dict(row)))
    return sorted(links, key=lambda link: (link.seq is None, link.seq or 0, link.table))


def start_of(connection: Connection, first: int) -> tuple[str, int] | None:
    """Where a chain whose first row is `first` starts: the genesis, or the checkpoint that
    pruned through the place before it (its anchor hash); None: rows are missing."""
    if first == 1:
        return GENESIS, 0
    checkpoints = AuditCheckpointRow.__table__  # type: ignore[attr-defined]
    anchor = connection.execute(
        select(checkpoints.c.anchor_hash)
        .where(checkpoints.c.pruned_through == first - 1)
        .order_by(checkpoints.c.chain_seq.desc())
        .limit(1)
    ).first()
    return (str(anchor.anchor_hash), first - 1) if anchor is not None else None


def walk(links: Sequence[Link], prev: str, seq: int) -> Problem | None:
    """The first break in `links` (chained, in order) following place `seq` of hash `prev`."""
    for link in links:
        assert link.seq is not None
        if link.seq > seq + 1:
            return Problem(
                Break.DELETED,
                f"chain row {seq + 1} is missing: it was deleted before {link.name}",
                link,
            )
        if link.seq <= seq:
            return Problem(Break.REORDERED, f"{link.name} repeats an earlier place", link)
        if link.row_hash != record_hash(link.table, link.prev_hash or "", link.values):
            return Problem(Break.CHANGED, f"{link.name} was changed after it was written", link)
        if link.prev_hash != prev:
            return Problem(
                Break.REORDERED,
                f"{link.name} does not follow the row before it: rows were reordered or replaced",
                link,
            )
        prev, seq = link.row_hash or "", link.seq
    return None


def verify(connection: Connection, anchors: Sequence[Anchor] = ()) -> Verdict:
    """The whole chain checked: its first break, or how many rows it holds intact (and, of
    the `anchors` noted elsewhere, how many it still holds)."""
    links = load_links(connection)
    chained = [link for link in links if link.seq is not None]
    outside = [link for link in links if link.seq is None]
    verdict = _verify_chain(connection, chained, outside, head_anchor(connection))
    if verdict.problem is not None:
        return verdict
    problem, checked = _anchor_problem(chained, anchors, verdict.pruned_through)
    return replace(verdict, problem=problem, anchors_checked=checked)


def head_anchor(connection: Connection) -> Anchor:
    """The head's place and hash (place 0, the genesis, before any row)."""
    head_row = connection.execute(select(AuditChainHeadRow.__table__)).mappings().first()  # type: ignore[attr-defined]
    return Anchor(int(head_row["seq"]), str(head_row["hash"])) if head_row else Anchor(0, GENESIS)


def _verify_chain(
    connection: Connection, chained: list[Link], outside: list[Link], head: Anchor
) -> Verdict:
    head_seq = head.seq
    first = chained[0].seq if chained else head_seq + 1
    assert first is not None
    start = start_of(connection, first)
    if start is None:
        missing = Problem(
            Break.DELETED,
            f"chain rows 1–{first - 1} are missing and no checkpoint accounts for them",
            chained[0] if chained else None,
        )
        return Verdict(len(chained), head, missing)
    problem = walk(chained, *start) or _end_problem(chained, head_seq, head.hash)
    if problem is None and outside:
        problem = Problem(Break.OUTSIDE, f"{outside[0].name} is not on the chain", outside[0])
    return Verdict(len(chained), head, problem, pruned_through=start[1])


def _anchor_problem(
    chained: Sequence[Link], anchors: Sequence[Anchor], pruned_through: int
) -> tuple[Problem | None, int]:
    """The first anchor the (otherwise intact) chain no longer holds; how many it holds. An
    anchor at a pruned place cannot be checked and is not counted."""
    by_seq = {link.seq: link for link in chained}
    checked = 0
    for anchor in anchors:
        if anchor.seq <= pruned_through:
            continue
        link = by_seq.get(anchor.seq)
        if link is None:
            sentence = f"chain row {anchor.seq}, noted as an anchor, is past the chain's end"
            return Problem(Break.REWRITTEN, f"{sentence}: it was cut and rewritten"), checked
        if link.row_hash != anchor.hash:
            sentence = f"{link.name} is not the row noted as anchor {anchor.seq}"
            return Problem(Break.REWRITTEN, f"{sentence}: the chain was rewritten", link), checked
        checked += 1
    return None, checked


def _end_problem(chained: Sequence[Link], head_seq: int, head: str) -> Problem | None:
    last_seq = chained[-1].seq if chained else 0
    assert last_seq is not None
    if head_seq > last_seq:
        missing = (
            f"chain row {head_seq} is missing"
            if head_seq == last_seq + 1
            else f"chain rows {last_seq + 1}–{head_seq} are missing"
        )
        return Problem(Break.DELETED, f"{missing}: the end of the chain was deleted")
    if head_seq < last_seq or (chained and chained[-1].row_hash != head):
        return Problem(Break.CHANGED, "the chain's head does not match its last row")
    return None


# --- Pruning the start ---


def oldest_before(connection: Connection, cutoff: datetime) -> int | None:
    """The first chained place written before `cutoff`, if any."""
    found = [
        connection.execute(
            select(func.min(model.__table__.c.chain_seq)).where(  # type: ignore[attr-defined]
                model.__table__.c.created_at < cutoff  # type: ignore[attr-defined]
            )
        ).scalar()
        for model in MODELS.values()
    ]
    present = [int(seq) for seq in found if seq is not None]
    return min(present) if present else None


def _first_recent(connection: Connection, cutoff: datetime) -> int | None:
    found = [
        connection.execute(
            select(func.min(model.__table__.c.chain_seq)).where(  # type: ignore[attr-defined]
                model.__table__.c.created_at >= cutoff  # type: ignore[attr-defined]
            )
        ).scalar()
        for model in MODELS.values()
    ]
    present = [int(seq) for seq in found if seq is not None]
    return min(present) if present else None


@dataclass(frozen=True)
class PruneResult:
    rows: int = 0
    refused: Problem | None = None  # the part to prune did not verify: nothing removed


def pruning(cutoff: datetime, batch: int) -> Op[PruneResult]:
    """An op removing up to `batch` chained rows from the start of the chain, all written
    before `cutoff` (a recent row ends the prefix), after checking them, and appending the
    checkpoint the rest verifies from."""

    def op(session: Session) -> PruneResult:
        connection = session.connection()
        head_seq, _ = lock_head(connection)
        first = _first_chained(connection)
        if first is None:
            return PruneResult()
        recent = _first_recent(connection, cutoff)
        through = min(first + batch - 1, head_seq, (recent or head_seq + 1) - 1)
        if through < first:
            return PruneResult()
        start = start_of(connection, first)
        links = load_links(connection, first, through)
        problem = (
            walk(links, *start)
            if start is not None
            else Problem(Break.DELETED, f"chain rows before {first} are missing")
        )
        if problem is not None:
            return PruneResult(refused=problem)
        for model in MODELS.values():
            column = col(model.__table__.c.chain_seq)  # type: ignore[attr-defined]
            connection.execute(
                delete(model.__table__).where(column >= first, column <= through)  # type: ignore[attr-defined]
            )
        checkpoint = {
            "pruned_through": through,
            "pruned_rows": len(links),
            "anchor_hash": links[-1].row_hash,
            "created_at": utcnow(),
        }
        rows = link_rows(connection, "audit_checkpoints", [checkpoint])
        connection.execute(insert(AuditCheckpointRow.__table__), rows)  # type: ignore[attr-defined]
        return PruneResult(rows=len(links))

    return op


def _first_chained(connection: Connection) -> int | None:
    found = [
        connection.execute(
            select(func.min(model.__table__.c.chain_seq))  # type: ignore[attr-defined]
        ).scalar()
        for model in MODELS.values()
    ]
    present = [int(seq) for seq in found if seq is not None]
    return min(present) if present else None


def chain_unchained(connection: Connection) -> int:
    """Places rows written before the chain existed (the migration): tool and write audits
    in the order they were written. Returns how many."""
    links = [link for link in load_links(connection) if link.seq is None]
    links.sort(key=lambda link: (aware(link.values["created_at"]), link.table, link.row_id))
    for link in links:
        values = dict(link.values)
        [placed] = link_rows(connection, link.table, [values])
        table = MODELS[link.table].__table__  # type: ignore[attr-defined]
        connection.execute(
            update(table)
            .where(table.c.id == link.row_id)
            .values(
                chain_seq=placed["chain_seq"],
                prev_hash=placed["prev_hash"],
                row_hash=placed["row_hash"],
            )
        )
    return len(links)
