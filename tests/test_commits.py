"""What a turn costs the database, counted in commits through the real store, on SQLite and
the real PostgreSQL (issue #12: a round's writes are one commit; a turn's bookkeeping rides
along). A regression that adds a commit of its own to every turn fails here; `bench/run.py`
prints the same figure."""

from __future__ import annotations

from bot.app import Kelpie
from tests.sql_counts import counting_commits
from tests.world import ALICE, SHOP_CHANNEL, World

# Native streaming, as in production. The heartbeat's next beat is far beyond the test, and
# so is the linger: a deferred write rides with the next commit however loaded the machine
# (a round slower than the default 0.5 s would otherwise commit it on its own).
QUIET = {"slack": {"streaming": "native"}, "database": {"lease_s": 600, "linger_s": 600}}


async def settled(world: World, bot: Kelpie) -> None:
    """The turn is over and whatever it left to the writer (deferred writes) committed."""
    await world.drain()
    await world.slack.wait_for(lambda _slack: bot.db.writer.idle, timeout=20)


async def answered_turn(world: World, bot: Kelpie, rounds: int, question: str) -> int:
    """Commits from a person's mention (a new thread) until its turn of `rounds` model
    rounds has answered and settled."""
    for _ in range(rounds - 1):
        world.model.reply_tool_calls([("list_pods", {"namespace": "shop"})])
    answer = f"All pods are fine ({question})."
    world.model.reply_text(answer)
    with counting_commits() as commits:
        event = await world.mention(SHOP_CHANNEL, ALICE, question)
        await world.slack.wait_for(
            lambda s: any(answer in (m.text or "") for m in s.thread(SHOP_CHANNEL, event["ts"])),
            timeout=60,
        )
        await settled(world, bot)
    return commits.count


async def test_a_turn_costs_one_commit_for_its_event_plus_one_per_round_and_its_stream(
    any_db_world: World,
):
    world = any_db_world
    bot = await world.start_bot(QUIET)
    # A first turn settles what the start leaves (the first heartbeat, the warm-up).
    await answered_turn(world, bot, 1, "warm-up")
    await settled(world, bot)

    one = await answered_turn(world, bot, 1, "one round")
    three = await answered_turn(world, bot, 3, "three rounds")

    # The event (before the ack); the session, message and turn, claimed, in one; the
    # stream's opening record; one per round, the last with the answer; the turn's end
    # with the stream's close record. At most: group commit may join the stream's opening
    # record to the first round's commit when both are queued at once.
    assert one <= 5
    assert three <= 7
