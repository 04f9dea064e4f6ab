"""Turn leases in the store, on SQLite and on the real PostgreSQL: one running turn per
thread whatever replica claims it, a dead replica's turns and deliveries taken over by
exactly one live replica, and nothing taken from a replica that still beats."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import asyncpg

from bot.store.approvals import ApprovalRepository
from bot.store.db import Database
from bot.store.inbox import Inbox
from bot.store.repositories import MessageRepository, SessionRepository
from bot.store.turns import Replica, TurnRepository
from bot.store.wakeups import LISTENER_NAME, PgListener, Wakeups, asyncpg_dsn
from bot.values import (
    Approval,
    ApprovalState,
    Message,
    Role,
    SessionInfo,
    TurnClaim,
    TurnInterrupt,
    TurnState,
    Wake,
    WritePlan,
    WriteTarget,
)
from tests.postgres import PostgresServer

THREAD = SessionInfo(
    id=0,
    session_key="T0TEST:C0SHOP:1700000000.000100",
    team_id="T0TEST",
    channel_id="C0SHOP",
    thread_ts="1700000000.000100",
    is_dm=False,
    role="viewer",
    cluster="prod",
    namespace="shop",
    started_by="U0ALICE",
)


def replica(name: str, ttl_s: float = 30) -> Replica:
    return Replica(name, timedelta(seconds=ttl_s))


async def opened(database_url: str) -> tuple[Database, int]:
    db = Database(database_url)
    await db.upgrade()
    session = await SessionRepository(db).get_or_create(THREAD)
    return db, session.id


def question(text: str) -> list[Message]:
    return [Message(Role.USER, text, slack_user="U0ALICE")]


async def test_a_thread_runs_one_turn_at_a_time_across_replicas(database_url: str):
    db, session_id = await opened(database_url)
    other = Database(database_url)  # another process's connections and writer
    a, b = TurnRepository(db, replica("a")), TurnRepository(other, replica("b"))
    try:
        assert await a.begin(
            replace(THREAD, id=session_id), "turn-a", "U0ALICE", question("one?"), "Ev1"
        )
        assert await b.begin(
            replace(THREAD, id=session_id), "turn-b", "U0ALICE", question("two?"), "Ev2"
        )
        # A delivery accepted once is not accepted again (a replay after a crash).
        assert not await b.begin(
            replace(THREAD, id=session_id), "turn-c", "U0ALICE", question("one?"), "Ev1"
        )
        claims = await asyncio.gather(
            a.claim(session_id, "turn-a", "U0ALICE"), b.claim(session_id, "turn-b", "U0ALICE")
        )
        assert sorted(claims) == [TurnClaim.RUNNING, TurnClaim.WAIT]
        first = claims[0] is TurnClaim.RUNNING
        winner, loser = (a, b) if first else (b, a)
        won, lost = ("turn-a", "turn-b") if first else ("turn-b", "turn-a")
        assert await loser.claim(session_id, lost, "U0ALICE") is TurnClaim.WAIT
        await winner.finish(won, TurnState.DONE)
        assert await loser.claim(session_id, lost, "U0ALICE") is TurnClaim.RUNNING
        texts = [m.content for m in await MessageRepository(db).all_for_session(session_id)]
        assert sorted(texts) == ["one?", "two?"]
    finally:
        await other.close()
        await db.close()


async def test_a_message_begins_its_turn_claimed_in_one_commit_unless_the_thread_runs_one(
    database_url: str,
):
    db = Database(database_url)
    await db.upgrade()
    other = Database(database_url)  # another process's connections and writer
    a, b = TurnRepository(db, replica("a")), TurnRepository(other, replica("b"))
    try:
        commits = db.writer.commits
        # Two replicas begin a turn in a new thread at once: one session, one running turn.
        begun = await asyncio.gather(
            a.begin(THREAD, "turn-a", "U0ALICE", question("one?"), "Ev1", claim=True),
            b.begin(THREAD, "turn-b", "U0ALICE", question("two?"), "Ev2", claim=True),
        )
        assert db.writer.commits == commits + 1  # session, message, turn and claim
        first, second = begun
        assert first is not None and second is not None
        assert first.session.id == second.session.id
        assert sorted([first.claimed, second.claimed]) == [False, True]
        assert [first.session.created, second.session.created].count(True) == 1
        session = first.session
        # A replayed delivery stores nothing twice.
        replay = await a.begin(session, "turn-c", "U0ALICE", question("one?"), "Ev1", claim=True)
        assert replay is None
        winner, won, loser, lost = (a, "turn-a", b, "turn-b")
        if second.claimed:
            winner, won, loser, lost = b, "turn-b", a, "turn-a"
        assert await loser.claim(session.id, lost, "U0ALICE") is TurnClaim.WAIT
        await winner.finish(won, TurnState.DONE)
        assert await loser.claim(session.id, lost, "U0ALICE") is TurnClaim.RUNNING
        texts = [m.content for m in await MessageRepository(db).all_for_session(session.id)]
        assert sorted(texts) == ["one?", "two?"]
    finally:
        await other.close()
        await db.close()


async def test_a_newer_message_on_another_replica_interrupts_the_running_turn(
    database_url: str,
):
    db, session_id = await opened(database_url)
    a, b = TurnRepository(db, replica("a")), TurnRepository(db, replica("b"))
    try:
        await a.begin(replace(THREAD, id=session_id), "turn-a", "U0ALICE", question("one?"))
        assert await a.claim(session_id, "turn-a", "U0ALICE") is TurnClaim.RUNNING
        assert await a.renew() == []
        # Its own turn is the local scheduler's to interrupt; another replica asks.
        assert not await a.request_interrupt(session_id)
        assert await b.request_interrupt(session_id)
        assert await a.renew() == [TurnInterrupt(THREAD.session_key, "turn-a")]
        await a.finish("turn-a", TurnState.INTERRUPTED)
        assert await a.renew() == []
        assert not await b.request_interrupt(session_id)
    finally:
        await db.close()


async def test_a_stop_on_another_replica_asks_the_running_one_naming_who_stopped(
    database_url: str,
):
    db, session_id = await opened(database_url)
    a, b = TurnRepository(db, replica("a")), TurnRepository(db, replica("b"))
    try:
        await a.begin(replace(THREAD, id=session_id), "turn-a", "U0ALICE", question("one?"))
        assert await b.running_elsewhere(THREAD.session_key) is None  # queued, not running
        assert await a.claim(session_id, "turn-a", "U0ALICE") is TurnClaim.RUNNING
        # Its own replica sees no turn running elsewhere; the other one sees who asked.
        assert await a.running_elsewhere(THREAD.session_key) is None
        remote = await b.running_elsewhere(THREAD.session_key)
        assert remote is not None and (remote.turn_id, remote.asker) == ("turn-a", "U0ALICE")
        assert (remote.team_id, remote.channel_id, remote.thread_ts) == (
            THREAD.team_id,
            THREAD.channel_id,
            THREAD.thread_ts,
        )
        assert not await a.request_stop("turn-a", "U0CAROL")  # its own: stopped locally
        assert await b.request_stop("turn-a", "U0CAROL")
        assert await a.interrupts() == [TurnInterrupt(THREAD.session_key, "turn-a", "U0CAROL")]
        await a.finish("turn-a", TurnState.INTERRUPTED)
        assert await a.renew() == [] and not await b.request_stop("turn-a", "U0CAROL")
        assert await b.running_elsewhere(THREAD.session_key) is None
    finally:
        await db.close()


async def test_a_queued_turn_stopped_through_any_replica_never_runs(database_url: str):
    db, session_id = await opened(database_url)
    a, b = TurnRepository(db, replica("a")), TurnRepository(db, replica("b"))
    try:
        await a.begin(replace(THREAD, id=session_id), "turn-a", "U0ALICE", question("one?"))
        # Queued on a, seen by both replicas (a stop may reach either).
        waiting = await b.queued_in(THREAD.session_key)
        assert [(turn.turn_id, turn.asker) for turn in waiting] == [("turn-a", "U0ALICE")]
        assert await a.queued_in(THREAD.session_key) == waiting
        assert await b.stop_queued("turn-a", "U0CAROL")
        assert not await a.stop_queued("turn-a", "U0CAROL")  # stopped once
        # Its replica's claim finds it gone: it never runs, and does not hold the thread.
        assert await a.claim(session_id, "turn-a", "U0ALICE") is TurnClaim.GONE
        assert await b.queued_in(THREAD.session_key) == []
        await a.begin(replace(THREAD, id=session_id), "turn-b", "U0ALICE", question("two?"))
        assert await a.claim(session_id, "turn-b", "U0ALICE") is TurnClaim.RUNNING
        # A running turn is not stopped as a queued one (its stop goes through its replica).
        assert not await b.stop_queued("turn-b", "U0CAROL")
        assert await b.running_elsewhere(THREAD.session_key) is not None
    finally:
        await db.close()


async def test_a_dead_replicas_turns_and_deliveries_are_taken_over_once(database_url: str):
    db, session_id = await opened(database_url)
    dead, beating = replica("dead", ttl_s=0.2), replica("beating", ttl_s=0.2)
    takers = [TurnRepository(db, replica(f"taker-{n}")) for n in range(3)]
    try:
        gone, alive = TurnRepository(db, dead), TurnRepository(db, beating)
        # A mention, a click and a slash command are taken over; a rename needs no handling.
        for key, kind in [
            ("Ev0LOST", "app_mention"),
            ("block_actions:1.T0.click", "block_actions"),
            ("command:2.T0.role", "command"),
            ("Ev0RENAME", "channel_rename"),
        ]:
            await Inbox(db, dead).record(key, kind, "{}")
        await gone.begin(replace(THREAD, id=session_id), "turn-dead", "U0ALICE", question("lost?"))
        assert await gone.claim(session_id, "turn-dead", "U0ALICE") is TurnClaim.RUNNING
        # A long answer went on in a second stream message: the first one was closed.
        await gone.message_opened("turn-dead", "1700000001.000200")
        await gone.message_opened("turn-dead", "1700000001.000300")
        await gone.message_closed("turn-dead", "1700000001.000200")
        await asyncio.sleep(0.3)
        await alive.begin(
            replace(THREAD, id=session_id), "turn-alive", "U0ALICE", question("kept?")
        )
        await alive.renew()

        taken = await asyncio.gather(*(t.take_orphans() for t in takers))
        orphans = [turn for found in taken for turn in found]
        assert [(o.turn_id, o.state, o.open_messages) for o in orphans] == [
            ("turn-dead", TurnState.RUNNING, ("1700000001.000300",))
        ]
        # The dead replica cannot end what was taken from it; the taker can.
        await gone.finish("turn-dead", TurnState.DONE)
        assert await alive.claim(session_id, "turn-alive", "U0ALICE") is TurnClaim.WAIT
        owner = next(t for t, found in zip(takers, taken, strict=True) if found)
        await owner.finish("turn-dead", TurnState.INTERRUPTED)
        assert await alive.claim(session_id, "turn-alive", "U0ALICE") is TurnClaim.RUNNING

        inboxes = [Inbox(db, replica(f"inbox-{n}", ttl_s=0.2)) for n in range(3)]
        deliveries = await asyncio.gather(*(i.take_orphans() for i in inboxes))
        assert sorted(d.key for found in deliveries for d in found) == [
            "Ev0LOST",
            "block_actions:1.T0.click",
            "command:2.T0.role",
        ]
        # Handled by its taker: nobody takes it again, even once the taker's lease is gone.
        for inbox, found in zip(inboxes, deliveries, strict=True):
            for delivery in found:
                await inbox.handled(delivery.key)
        await asyncio.sleep(0.3)
        assert await Inbox(db, replica("late", ttl_s=0.2)).take_orphans() == []
    finally:
        await db.close()


def scale_approval(session_id: int) -> Approval:
    target = WriteTarget("Deployment", "shop", "checkout-api", "uid-1", "7")
    return Approval(
        id="approval-leased",
        session_id=session_id,
        turn_id="turn-1",
        tool_call_id="call-1",
        plan=WritePlan("scale", "Scale checkout-api to 5", "prod", target, (), {}),
        reason="",
        role="operator",
        channel_id=THREAD.channel_id,
        thread_ts=THREAD.thread_ts,
        requested_by="U0ALICE",
        status=ApprovalState.PENDING,
        expires_at=datetime.now(UTC) + timedelta(minutes=10),
    )


class Clock:
    """An injected clock several replicas share: leases lapse when the test says so."""

    def __init__(self) -> None:
        self.now = datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def clocked(name: str, clock: Clock, ttl_s: float = 3) -> Replica:
    return Replica(name, timedelta(seconds=ttl_s), clock)


async def test_an_approved_change_is_reconciled_only_once_its_replicas_lease_expired(
    database_url: str,
):
    """The replica that approved a change owns its execution until the outcome: another
    replica's reconciliation leaves it alone while the owner beats, the owner never
    reconciles its own live work, and once the owner's lease lapsed exactly one of two
    racing replicas takes it; the old owner's write and outcome are then fenced off."""
    db, session_id = await opened(database_url)
    other = Database(database_url)  # another process's connections and writer
    clock = Clock()
    a = clocked("a", clock)
    owner = ApprovalRepository(db, a)
    b = ApprovalRepository(db, clocked("b", clock))
    c = ApprovalRepository(other, clocked("c", clock))
    try:
        approval = scale_approval(session_id)
        await owner.create(approval)
        assert await owner.transition(
            approval.id,
            ApprovalState.APPROVED,
            by="U0CAROL",
            now=clock(),
            require_unexpired=True,
        )
        # Executing on a live replica: not another's to reconcile.
        assert await b.unfinished() == []
        assert not await b.claim_unfinished(approval.id)
        # Its heartbeat keeps it past the lease taken at the click.
        clock.advance(2)
        await TurnRepository(db, a).renew()
        clock.advance(2)
        assert await c.unfinished() == []
        assert not await c.claim_unfinished(approval.id)
        # It stops beating (stalled): its lease lapses. It never reconciles its own live
        # work; exactly one of two racers takes the row.
        clock.advance(4)
        assert await owner.unfinished() == []
        assert not await owner.claim_unfinished(approval.id)
        assert [found.id for found in await b.unfinished()] == [approval.id]
        claims = await asyncio.gather(
            b.claim_unfinished(approval.id), c.claim_unfinished(approval.id)
        )
        assert sorted(claims) == [False, True]
        winner = b if claims[0] else c
        # The old owner, back: its write is fenced off and its outcome refused.
        assert not await owner.holds(approval.id)
        assert not await owner.set_outcome(approval.id, "executed: scaled to 5")
        assert await winner.set_outcome(approval.id, "not executed: ask again")
        stored = await b.get(approval.id)
        assert stored is not None and stored.outcome == "not executed: ask again"
        clock.advance(10)
        assert await ApprovalRepository(db, clocked("d", clock)).unfinished() == []
    finally:
        await other.close()
        await db.close()


async def test_a_live_turn_is_taken_only_once_its_lease_lapsed_and_its_old_owner_stops(
    database_url: str,
):
    db, session_id = await opened(database_url)
    other = Database(database_url)
    clock = Clock()
    a = TurnRepository(db, clocked("a", clock))
    b = TurnRepository(other, clocked("b", clock))
    thread = replace(THREAD, id=session_id)
    try:
        assert await a.begin(thread, "turn-a", "U0ALICE", question("slow?"), claim=True)
        clock.advance(2)
        assert await a.renew() == []
        clock.advance(2)
        assert await b.take_orphans() == []  # renewed: still a's
        clock.advance(4)  # a stalled: its lease lapsed
        # A process never takes over its own live turn, whatever the lease says.
        assert await a.take_orphans() == []
        taken = await b.take_orphans()
        assert [(turn.turn_id, turn.released) for turn in taken] == [("turn-a", False)]
        # The old owner learns at its next renewal that the turn is no longer its own.
        assert await a.renew() == [TurnInterrupt(THREAD.session_key, "turn-a")]
        await a.finish("turn-a", TurnState.DONE)  # fenced: changes nothing
        assert await a.renew() == []  # it stopped: nothing held
        await a.begin(thread, "turn-next", "U0ALICE", question("next?"))
        assert await a.claim(session_id, "turn-next", "U0ALICE") is TurnClaim.WAIT
        await b.finish("turn-a", TurnState.INTERRUPTED)
        assert await a.claim(session_id, "turn-next", "U0ALICE") is TurnClaim.RUNNING
    finally:
        await other.close()
        await db.close()


async def test_an_interrupt_meant_for_a_dead_replicas_turn_never_stops_the_newer_one(
    database_url: str,
):
    """A newer message on the restarted replica asks the dead one's running turn to stop;
    that replica takes the turn over to close it: the request (and any that comes while it
    closes it) is not the heartbeat's to hand over, since the thread's turn that runs here is
    the newer message's own, which it would stop instead."""
    db, session_id = await opened(database_url)
    clock = Clock()
    dead, restarted = clocked("dead", clock), clocked("restarted", clock)
    gone, here = TurnRepository(db, dead), TurnRepository(db, restarted)
    other = TurnRepository(db, clocked("other", clock))
    thread = replace(THREAD, id=session_id)
    try:
        assert await gone.begin(thread, "turn-old", "U0BOB", question("pods?"), claim=True)
        clock.advance(4)  # the dead replica's lease lapsed
        await here.begin(thread, "turn-new", "U0BOB", question("scale it?"))
        assert await here.request_interrupt(session_id)  # aimed at the dead replica's turn
        assert [turn.turn_id for turn in await here.take_orphans()] == ["turn-old"]
        assert await here.renew() == []
        assert await other.request_interrupt(session_id)  # while it is being closed
        assert await here.renew() == [] and await here.interrupts() == []
        assert here.held_turns() == [TurnInterrupt(THREAD.session_key, "turn-new")]
        await here.finish("turn-old", TurnState.INTERRUPTED)
        # The newer turn runs, and is the one an interrupt from elsewhere reaches now.
        assert await here.claim(session_id, "turn-new", "U0BOB") is TurnClaim.RUNNING
        assert await other.request_interrupt(session_id)
        assert await here.renew() == [TurnInterrupt(THREAD.session_key, "turn-new")]
    finally:
        await db.close()


async def test_a_turn_whose_end_could_not_be_stored_is_released_and_closed_with_a_note(
    database_url: str,
):
    """Its replica renews only the turns it really runs: a released one lapses, and its
    own takeover (or any replica's) closes it, so the thread's next turn runs."""
    db, session_id = await opened(database_url)
    clock = Clock()
    a = TurnRepository(db, clocked("a", clock))
    thread = replace(THREAD, id=session_id)
    try:
        assert await a.begin(thread, "turn-a", "U0ALICE", question("one?"), claim=True)
        await a.begin(thread, "turn-b", "U0ALICE", question("two?"))
        a.release("turn-a")  # its end failed to store, retries and all
        for _ in range(3):  # beating on: the released turn is not renewed
            clock.advance(2)
            assert await a.renew() == []
        assert await a.claim(session_id, "turn-b", "U0ALICE") is TurnClaim.WAIT
        taken = await a.take_orphans()
        assert [(turn.turn_id, turn.released) for turn in taken] == [("turn-a", True)]
        await a.finish("turn-a", TurnState.INTERRUPTED)
        assert await a.claim(session_id, "turn-b", "U0ALICE") is TurnClaim.RUNNING
    finally:
        await db.close()


async def until(condition: Callable[[], bool], timeout_s: float = 30) -> None:
    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0.02)


async def test_on_postgresql_a_write_wakes_the_other_replica_and_a_dropped_listener_returns(
    postgres: PostgresServer,
):
    url = await postgres.new_database()
    db, session_id = await opened(url)
    other = Database(url)
    a, b = TurnRepository(db, replica("a")), TurnRepository(other, replica("b"))
    wakeups = Wakeups()
    # Probing rarely: a connection the server closes is noticed without it.
    listener = PgListener(url, wakeups, retry_s=0.1, probe_s=120)
    with wakeups.watch(Wake.INTERRUPT) as interrupts, wakeups.watch(Wake.TURN_ENDED) as ended:
        try:
            listener.start()
            await until(lambda: listener.connections == 1)
            # Connecting wakes every watcher (what was sent before was lost): consumed here.
            assert await interrupts.wait(5) and await ended.wait(5)
            for turn in ("turn-1", "turn-2"):
                await a.begin(replace(THREAD, id=session_id), turn, "U0ALICE", question("slow?"))
                assert await a.claim(session_id, turn, "U0ALICE") is TurnClaim.RUNNING
                assert not await interrupts.wait(0.2)  # nothing pending
                # Another replica's stop wakes this one's interrupt watcher, and the turn's
                # end wakes whoever waits for the thread. `wait` is True only when woken.
                assert await b.request_stop(turn, "U0CAROL")
                assert await interrupts.wait(30)
                await a.finish(turn, TurnState.INTERRUPTED)
                assert await ended.wait(30)
                if turn == "turn-1":  # the listening connection is killed: it comes back
                    assert await kill_listeners(url) == 1
                    await until(lambda: listener.connections == 2)
                    assert await interrupts.wait(5) and await ended.wait(5)
            assert listener.connections == 2
        finally:
            await listener.drain()
            await other.close()
            await db.close()


async def kill_listeners(url: str) -> int:
    connection = await asyncpg.connect(asyncpg_dsn(url))
    try:
        return int(
            await connection.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE application_name = $1",
                LISTENER_NAME,
            )
        )
    finally:
        await connection.close()


async def test_a_finished_turns_closing_calls_are_taken_by_one_replica_once_its_own_stops(
    database_url: str,
):
    """Kept with the turn's end under its replica's lease (renewed while it beats), taken
    by exactly one live replica once that lease expired, and never again once sent."""
    db, session_id = await opened(database_url)
    thread = replace(THREAD, id=session_id)
    stopped = TurnRepository(db, replica("stopped", ttl_s=1))
    live = [TurnRepository(db, replica(name)) for name in ("a", "b")]
    calls = '[{"method":"reactions.remove","args":{"name":"eyes"}}]'
    await stopped.begin(thread, "t1", "U0ALICE", question("q"), claim=True)
    await stopped.finish("t1", TurnState.DONE, closing=calls)
    await stopped.renew()
    assert [await r.take_closings() for r in live] == [[], []]

    await asyncio.sleep(1.1)  # its lease runs out: it stopped beating
    taken = await asyncio.gather(*(r.take_closings() for r in live))
    assert sorted(len(found) for found in taken) == [0, 1]
    winner, found = next((r, f) for r, f in zip(live, taken, strict=True) if f)
    assert (found[0].turn_id, found[0].calls_json) == ("t1", calls)
    assert found[0].ended_at is not None and found[0].ended_at.tzinfo is not None
    winner.closing_sent("t1")
    await winner.renew()  # a durable write: the deferred mark rides with it
    await asyncio.sleep(1.1)
    assert [await r.take_closings() for r in live] == [[], []]
    await db.close()
