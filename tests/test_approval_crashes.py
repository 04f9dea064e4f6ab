"""kill -9 at the worst moments of an approval: kelpie runs as a real subprocess (`kelpie
run`) against the test world's peers, is killed with SIGKILL, and started again. The thread
and the cluster must show exactly what happened: never a write run twice or blindly, never
a card left with live buttons, never an outcome nobody hears about."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bot.approvals import copy as approval_copy
from tests.bot_processes import Launcher, Start
from tests.peers.model_server import HangStep, Step
from tests.test_approvals import (
    approval_id,
    card_now,
    card_text,
    click,
    has_buttons,
    propose_scale,
    real_writes,
    replicas,
    wait_said,
)
from tests.world import ALICE, CAROL, OPS_CHANNEL, SHOP_CHANNEL, World


@pytest.fixture
def crashable(launch: Launcher) -> Start:
    """One `kelpie run` on the world's config, started again after each kill."""
    return launch()


async def wait_db(db: Path, sql: str, want: Callable[[list[tuple[Any, ...]]], bool]) -> None:
    for _ in range(400):
        try:
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as connection:
                if want(connection.execute(sql).fetchall()):
                    return
        except sqlite3.OperationalError:
            pass
        await asyncio.sleep(0.05)
    raise AssertionError(f"database never showed {sql}")


async def card_settled(world: World, card: Any) -> Any:
    def settled(server: Any) -> Any:
        message = server.get_message(OPS_CHANNEL, card.ts)
        return message if "Outcome" in card_text(message) else None

    return await world.slack.wait_for(settled, timeout=60)


async def test_killed_after_the_click_was_recorded_the_write_is_reported_not_executed(
    world: World, crashable: Callable[[], Any]
):
    bot = await crashable()
    mention, card = await propose_scale(world, timeout=120)  # a fresh process imports LiteLLM
    identifier = approval_id(card)
    # The turn ended at the card: the session waits on a person.
    await world.slack.wait_for(
        lambda s: s.session_status(OPS_CHANNEL, mention["ts"]) == "suspended", timeout=30
    )
    world.kube.delay(r"/deployments/checkout-api$", 30)  # the pre-write re-read hangs
    await click(world, CAROL, card)
    await wait_db(
        world.tmp / "k.db",
        f"SELECT status FROM approvals WHERE id = '{identifier}'",
        lambda rows: rows == [("approved",)],
    )
    bot.kill()
    world.kube.clear_faults()
    await crashable()
    said = await wait_said(world, mention["ts"], "not executed", timeout=120)
    assert approval_copy.RECONCILED_NOT_EXECUTED in said.text  # true after a restart too
    final = await card_settled(world, card)
    assert not has_buttons(final) and "not executed" in card_text(final)
    assert real_writes(world) == [] and replicas(world) == 3
    # No turn follows this decision: the session stops waiting on its own.
    await world.slack.wait_for(
        lambda s: s.session_status(OPS_CHANNEL, mention["ts"]) == "active", timeout=30
    )
    statuses = world.slack.agent_sessions[(OPS_CHANNEL, mention["ts"])].statuses
    assert statuses == ["processing", "suspended", "active"]


async def test_killed_after_the_write_reached_the_cluster_the_change_is_confirmed(
    world: World, crashable: Callable[[], Any]
):
    bot = await crashable()
    mention, card = await propose_scale(world, timeout=120)  # a fresh process imports LiteLLM
    world.kube.delay_response(r"/deployments/checkout-api/scale$", 30)
    await click(world, CAROL, card)
    await world.slack.wait_for(lambda s: replicas(world) == 5, timeout=30)
    bot.kill()
    world.kube.clear_faults()
    await crashable()
    said = await wait_said(world, mention["ts"], "confirmed by reading the target", timeout=120)
    assert "Scale deployment shop/checkout-api" in said.text
    assert said.text.endswith(f": {approval_copy.RECONCILED_EXECUTED}.")
    final = await card_settled(world, card)
    assert not has_buttons(final) and "executed" in card_text(final)
    # The write ran once; nothing ran it again.
    assert len(real_writes(world)) == 1 and replicas(world) == 5


@pytest.fixture
def crashable_any_db(any_db_world: World, tmp_path: Path) -> Iterator[tuple[World, Start]]:
    """`crashable` on SQLite and on the real PostgreSQL."""
    launcher = Launcher(any_db_world, tmp_path)
    yield any_db_world, launcher()
    launcher.kill_all()


def is_card(params: dict[str, Any]) -> bool:
    return "approval:" in str(params.get("blocks"))


async def test_a_card_whose_ts_was_not_stored_loses_its_buttons_when_clicked(
    crashable_any_db: tuple[World, Start],
):
    world, crashable = crashable_any_db
    bot = await crashable()
    # The card reaches Slack, but kelpie is killed before it hears its ts, so never stores it.
    answered = world.slack.hold_answer("chat.postMessage", is_card)
    _, card = await propose_scale(world, timeout=120)  # a fresh process imports LiteLLM
    bot.kill()
    answered.set()
    await crashable()
    assert has_buttons(await card_now(world, card))

    await click(world, CAROL, card)
    # The click's own message is the card: it is updated there, without its buttons.
    update = await world.slack.wait_for_call(
        "chat.update", lambda c: c.params.get("ts") == card.ts, timeout=60
    )
    assert update.ok and "actions" not in str(update.params.get("blocks"))
    final = await card_settled(world, card)
    assert not has_buttons(final) and "Approved by" in card_text(final)
    assert len(real_writes(world)) == 1 and replicas(world) == 5


async def test_a_denied_write_is_audited_before_the_model_hears_of_it(
    world: World, crashable: Callable[[], Any]
):
    # A viewer channel: the model asks for a write it was not offered, and a read beside it.
    world.model.reply_tool_calls(
        [
            ("delete_pod", {"namespace": "shop", "name": "checkout-api-0"}),
            ("list_pods", {"namespace": "shop"}),
        ]
    )
    bot = await crashable()

    def kill_on_arrival(body: dict[str, Any]) -> Step:
        # The request telling the model about the denial: kelpie dies the moment it arrives,
        # well inside the writer's 0.5 s linger for batched writes.
        bot.kill()
        return HangStep(60)

    world.model.reply_with(kill_on_arrival)
    await world.mention(SHOP_CHANNEL, ALICE, "delete the crashing pod")
    await world.model.wait_for_requests(2, timeout=120)  # a fresh process imports LiteLLM
    told = world.model.requests[1]["messages"][-2:]
    assert any("may not run write/delete_pod" in str(m.get("content")) for m in told)

    with sqlite3.connect(f"file:{world.tmp / 'k.db'}?mode=ro", uri=True) as connection:
        rows = connection.execute(
            "SELECT stage, decision FROM tool_audit WHERE tool = 'write/delete_pod'"
        ).fetchall()
    assert ("channel role", "deny") in rows
