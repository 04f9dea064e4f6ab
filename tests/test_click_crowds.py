"""A crowd of clicks on an approval card (people who may not decide it, one person clicking
again and again) does not hold up the approver's click: user-group members are kept for a
short while, and each person's clicks are limited. The fake Slack counts the lookups; the
bot's clock is moved by hand."""

from __future__ import annotations

import asyncio

from bot.slack import copy
from bot.slack.clicks import CLICKS, WINDOW_S
from bot.slack.people import MEMBERS_TTL_S
from tests.test_approvals import approval_id, click, propose_scale, real_writes, replicas, wait_said
from tests.world import BOB, DAVE, OPS_CHANNEL, World

CROWD = [f"U0CROWD{i:02d}" for i in range(30)]


class Clock:
    """A monotonic clock the test moves on."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def lookups(world: World) -> int:
    return len(world.slack.calls_to("usergroups.users.list"))


def told(world: World, user: str, text: str | None = None) -> int:
    return sum(1 for e in world.slack.ephemerals(OPS_CHANNEL, user) if text in (None, e.text))


async def test_an_approver_is_not_held_up_by_a_crowd_of_clicks(world: World):
    clock = Clock()
    await world.start_bot(clock=clock)
    mention, card = await propose_scale(world, then="Scaled.")
    before = lookups(world)
    card_id = approval_id(card)  # the card object is updated in place once decided
    spam = [click(world, user, card, value=card_id) for user in CROWD]
    spam += [click(world, BOB, card, value=card_id) for _ in range(CLICKS + 15)]
    await asyncio.gather(*spam[:40], click(world, DAVE, card, value=card_id), *spam[40:])
    await wait_said(world, mention["ts"], "Scaled.")
    assert len(real_writes(world)) == 1 and replicas(world) == 5

    def everyone_answered(_: object) -> bool:
        return all(told(world, user) for user in CROWD) and told(world, BOB) == CLICKS + 1

    await world.slack.wait_for(everyone_answered, timeout=20)
    # One lookup for the crowd, and DAVE's membership asked again at his own click.
    assert lookups(world) - before <= 2
    # BOB's clicks past the limit: told once, then nothing (neither checked nor answered).
    assert told(world, BOB, copy.CLICKING_TOO_FAST) == 1
    assert all(told(world, user) == 1 for user in CROWD)

    # Once the kept list is older than its time to live, the next click asks Slack again;
    # once BOB's window has passed, his click is answered again.
    clock.now += max(MEMBERS_TTL_S, WINDOW_S) + 1
    asked = lookups(world)
    await click(world, CROWD[0], card, value=card_id)
    await click(world, BOB, card, value=card_id)
    await world.slack.wait_for(
        lambda _: told(world, CROWD[0]) == 2 and told(world, BOB) == CLICKS + 2
    )
    assert lookups(world) == asked + 1
    assert told(world, BOB, copy.CLICKING_TOO_FAST) == 1
