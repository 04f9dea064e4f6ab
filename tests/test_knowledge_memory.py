"""Memory a person confirms, through the whole bot: an answer's Mark resolved button makes
kelpie propose a memory (the low-tier model reads the thread) on a card with Remember /
Discard; only a click by someone in the channel decides it; a remembered incident is
offered and found in a later thread about the same workload, a discarded one is not."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlmodel import col, select

from bot.approvals.verify import RECOVERED
from bot.slack.memory import DISCARD_ACTION, MARK_RESOLVED_ACTION, REMEMBER_ACTION
from bot.store.memory import MEMORY_AUDIT_TOOL
from bot.store.tables import ToolAuditRow
from tests.bot_processes import Launcher
from tests.peers.model_server import DynamicStep, TextStep
from tests.postgres import free_port
from tests.test_alerts import alerting, fired, header, payload, post
from tests.test_approvals import click as click_approval
from tests.test_approvals import wait_card, wait_said
from tests.test_operator_cli import kelpie, write_config
from tests.test_record import kelpie_command, record_file
from tests.test_verify import DeadReplica, following_restart
from tests.world import ALICE, BOB, CAROL, OPS_CHANNEL, SHOP_CHANNEL, World, merge

MEMORY_ON = {"knowledge": {"memory": {"enabled": True}}}
PROPOSAL = {
    "symptom": "checkout-api returned 502s",
    "cause": "a bad config push",
    "fix": "rolled the config back",
}


def button(message: Any, action: str) -> str | None:
    for block in message.blocks or []:
        for element in block.get("elements", []):
            if isinstance(element, dict) and element.get("action_id") == action:
                return str(element["value"])
    return None


async def resolved_thread(world: World, workload: str, proposal: dict[str, str]) -> Any:
    """A thread about `workload` answered, Mark resolved pressed by ALICE: its memory card."""
    world.model.reply_tool_calls([("describe_deployment", {"namespace": "shop", "name": workload})])
    world.model.reply_text(f"{workload} lost its config [E1]; roll it back.")
    mention = await world.mention(SHOP_CHANNEL, ALICE, f"{workload} returns 502s, why?")

    def answered(server: Any) -> Any:
        found = [m for m in server.thread(SHOP_CHANNEL, mention["ts"]) if m.is_bot]
        return next((m for m in found if button(m, MARK_RESOLVED_ACTION)), None)

    answer = await world.slack.wait_for(answered, timeout=20)
    world.model.reply_text(json.dumps(proposal))  # the proposal the low tier writes
    await click(world, ALICE, answer, MARK_RESOLVED_ACTION)

    return await memory_card(world, SHOP_CHANNEL, mention["ts"])


async def memory_card(world: World, channel: str, thread_ts: str) -> Any:
    """The thread's memory card (the message with a Remember button), once it is there."""

    def card(server: Any) -> Any:
        found = [m for m in server.thread(channel, thread_ts) if button(m, REMEMBER_ACTION)]
        return found[0] if found else None

    return await world.slack.wait_for(card, timeout=20)


async def click(world: World, user: str, message: Any, action: str) -> None:
    value = button(message, action)
    assert value is not None
    payload = world.slack.block_action(user, SHOP_CHANNEL, message.ts, action, value)
    await world.slack.deliver("interactive", payload)


async def decided(world: World, card: Any, text: str) -> None:
    def shows(server: Any) -> bool:
        now = server.get_message(SHOP_CHANNEL, card.ts)
        return now is not None and text in (now.text or "") and not button(now, REMEMBER_ACTION)

    await world.slack.wait_for(shows, timeout=20)


async def ask(world: World, text: str, calls: list[tuple[str, dict[str, Any]]]) -> int:
    first = len(world.model.requests)
    world.model.reply_tool_calls(calls)
    world.model.reply_text("Answered.")
    mention = await world.mention(SHOP_CHANNEL, ALICE, text)
    await world.wait_bot_replies(SHOP_CHANNEL, mention["ts"], 1)
    await world.model.wait_for_requests(first + 2, timeout=20)
    return first


def tool_result(world: World, index: int) -> str:
    messages = world.model.requests[index]["messages"]
    return str([m for m in messages if m["role"] == "tool"][-1]["content"])


async def test_a_remembered_incident_is_found_later_and_a_discarded_one_is_not(world: World):
    world.slack.set_members(SHOP_CHANNEL, [ALICE, CAROL])
    await world.start_bot(MEMORY_ON)

    card = await resolved_thread(world, "checkout-api", PROPOSAL)
    assert "*Symptom:* checkout-api returned 502s" in card.text
    assert "*Cause:* a bad config push" in card.text and "E1" in card.text
    # The low tier read the thread (its question and the answer), not instructions.
    proposal_request = json.dumps(world.model.requests[-1]["messages"])
    assert "checkout-api returns 502s, why?" in proposal_request
    # BOB is not in the channel: his click is refused and decides nothing.
    await click(world, BOB, card, REMEMBER_ACTION)
    await world.slack.wait_for(lambda s: s.ephemerals(SHOP_CHANNEL, BOB), timeout=20)
    assert "Only people in this channel" in world.slack.ephemerals(SHOP_CHANNEL, BOB)[0].text
    assert button(world.slack.get_message(SHOP_CHANNEL, card.ts), REMEMBER_ACTION)
    await click(world, CAROL, card, REMEMBER_ACTION)
    await decided(world, card, f"Remembered by <@{CAROL}>")
    # The decision is a row of the audit chain naming who decided; the chain verifies.
    ran = await kelpie("audit", "verify", "--config", str(write_config(world)))
    assert ran.code == 0 and ran.out.startswith("intact: "), ran.out
    decisions = await memory_audits(world)
    assert [(a.slack_user, a.decision) for a in decisions] == [(CAROL, "remembered")]
    # ... and the thread's incident record shows it.
    await kelpie_command(world, ALICE, "record", SHOP_CHANNEL)
    record = await record_file(world, card.thread_ts)
    assert f"**Memory remembered** by @{CAROL}: checkout-api returned 502s" in record.text

    cart = {"symptom": "cart timed out", "cause": "redis full", "fix": "flushed redis"}
    discarded = await resolved_thread(world, "cart", cart)
    await click(world, CAROL, discarded, DISCARD_ACTION)
    await decided(world, discarded, f"Discarded by <@{CAROL}>")

    # A later thread about checkout-api is offered the incident and finds it.
    past = ("past_incidents", {"workload": "checkout-api"})
    first = await ask(world, "checkout-api is slow again", [past])
    system = str(world.model.requests[first]["messages"][0]["content"])
    assert "past incident #1: checkout-api returned 502s (shop/checkout-api)" in system
    found = tool_result(world, first + 1)
    assert "Cause: a bad config push" in found and "Fix: rolled the config back" in found

    # One about the cart finds nothing: its memory was discarded.
    first = await ask(world, "cart is failing", [("past_incidents", {"workload": "cart"})])
    assert "past incident" not in str(world.model.requests[first]["messages"][0]["content"])
    assert tool_result(world, first + 1).endswith(
        "No remembered incident matches in the namespaces this channel may read."
    )


async def memory_audits(world: World) -> list[ToolAuditRow]:
    async with world.bots[-1].db.sessions() as read:
        found = await read.exec(
            select(ToolAuditRow).where(col(ToolAuditRow.tool) == MEMORY_AUDIT_TOOL)
        )
        return list(found.all())


async def test_a_proposal_cut_by_kill_9_is_offered_once_by_the_next_replica(
    world: World, launch: Launcher
):
    """Mark resolved, then the replica dies during the low tier's proposal: the offer was
    stored before the model was asked, and the next replica (once the dead one's hold is
    over) proposes it and posts its one card. Pressing Mark resolved again asks nothing."""
    world.slack.set_members(SHOP_CHANNEL, [ALICE, CAROL])
    bot = await launch(MEMORY_ON)()
    world.model.reply_text("checkout-api lost its config [E1]; roll it back.")
    mention = await world.mention(SHOP_CHANNEL, ALICE, "checkout-api returns 502s, why?")
    answer = await world.slack.wait_for(lambda s: answered(s, mention["ts"]), timeout=30)
    world.model.reply_held()  # the proposal's request: held until the kill
    asked = len(world.model.requests) + 1
    await click(world, ALICE, answer, MARK_RESOLVED_ACTION)
    await world.model.wait_for_requests(asked, timeout=30)
    bot.kill()

    world.model.reply_text(json.dumps(PROPOSAL))
    later = datetime.now(UTC) + timedelta(hours=1)  # the dead replica's hold is over
    await world.start_bot(MEMORY_ON, alert_clock=lambda: later)
    card = await memory_card(world, SHOP_CHANNEL, mention["ts"])
    assert "*Cause:* a bad config push" in card.text
    await click(world, CAROL, answer, MARK_RESOLVED_ACTION)  # pressed again: offered before
    await click(world, CAROL, card, REMEMBER_ACTION)
    await decided(world, card, f"Remembered by <@{CAROL}>")
    await world.drain()
    proposals = [r for r in world.model.requests if "incident memory" in json.dumps(r)]
    assert len(proposals) == 2  # the one cut by the kill, the one the next replica made
    thread = world.slack.thread(SHOP_CHANNEL, mention["ts"])
    assert len([m for m in thread if m.blocks and "memory:" in json.dumps(m.blocks)]) == 1


def answered(server: Any, thread_ts: str) -> Any:
    found = [m for m in server.thread(SHOP_CHANNEL, thread_ts) if m.is_bot]
    return next((m for m in found if button(m, MARK_RESOLVED_ACTION)), None)


def proposal_or_turn(body: dict[str, Any]) -> TextStep:
    """The memory proposal's request gets its JSON, the turn after the decision its answer
    (which comes first is the verification's business, not the test's)."""
    if "incident memory" in str(body["messages"][0]["content"]):
        return TextStep(json.dumps({**PROPOSAL, "fix": "scaled checkout-api to 5"}))
    return TextStep("Scaled.")


async def test_a_verified_write_offers_its_memory_card_with_the_workload(world: World):
    world.slack.set_members(OPS_CHANNEL, [ALICE, CAROL])
    await world.start_bot(MEMORY_ON)
    scale = {"namespace": "shop", "name": "checkout-api", "replicas": 5, "reason": "spike"}
    world.model.reply_tool_calls([("scale_deployment", scale)])
    world.model.enqueue(DynamicStep(proposal_or_turn))
    world.model.enqueue(DynamicStep(proposal_or_turn))
    mention = await world.mention(OPS_CHANNEL, ALICE, "scale checkout-api to 5")
    card = await wait_card(world, mention["ts"])
    await click_approval(world, CAROL, card)
    await wait_said(world, mention["ts"], "Recovered:")

    offered = await memory_card(world, OPS_CHANNEL, mention["ts"])
    assert "*Fix:* scaled checkout-api to 5" in offered.text
    assert "*Keys:* shop checkout-api" in offered.text
    # The low tier read the verdict as the thread's resolution.
    asked = [r for r in world.model.requests if "incident memory" in json.dumps(r["messages"])]
    assert "resolution: Recovered: Scale deployment shop/checkout-api" in json.dumps(asked)


def proposal_or_investigation(body: dict[str, Any]) -> TextStep:
    if "incident memory" in str(body["messages"][0]["content"]):
        return TextStep(json.dumps({**PROPOSAL, "fix": "it recovered by itself"}))
    return TextStep("Investigated.")


async def test_a_resolved_alert_offers_its_memory_card_with_the_alert_and_workload(
    world: World,
):
    port = free_port()
    await world.start_bot(merge(alerting(port), MEMORY_ON))
    world.model.reply_default(DynamicStep(proposal_or_investigation))
    group = '{}:{alertname="CheckoutDown"}'
    alert = fired("CheckoutDown", "checkout-0", deployment="checkout-api")
    await post(port, payload(group, [alert]))
    first = await header(world, "CheckoutDown", "Firing")
    await world.wait_bot_replies(SHOP_CHANNEL, first.ts, 2)  # the investigation answered
    await post(port, payload(group, [alert], status="resolved"))

    offered = await memory_card(world, SHOP_CHANNEL, first.ts)
    assert "*Fix:* it recovered by itself" in offered.text
    assert "*Keys:* shop checkout-api CheckoutDown" in offered.text


@pytest.mark.parametrize("said_before", [False, True], ids=["unsaid", "said"])
async def test_a_recovered_verdict_a_dead_replica_left_offers_its_memory_once(
    world: World, said_before: bool
):
    """A replica killed after storing a Recovered verdict, before saying it (or after saying
    it, before offering the memory): the next one says it unless it was said, and offers the
    memory once, knowing only the stored sentence."""
    mention, identifier = await following_restart(world)
    dead = DeadReplica(world.config.database.url)
    stored = RECOVERED.format(what="Restart deployment shop/checkout-api", evidence="all ready")
    try:
        await dead.conclude(identifier, stored, said_ts="1.000001" if said_before else None)
        await world.start_bot(MEMORY_ON)
        offered = await memory_card(world, OPS_CHANNEL, mention["ts"])
        assert "*Keys:* shop checkout-api" in offered.text
        await dead.state(identifier, "done")
        await world.drain()
    finally:
        await dead.db.close()
    thread = world.slack.thread(OPS_CHANNEL, mention["ts"])
    verdicts = [m for m in thread if m.is_bot and m.text == stored]
    assert len(verdicts) == (0 if said_before else 1)
    assert all(float(v.ts) < float(offered.ts) for v in verdicts)  # the verdict comes first
    asked = [r for r in world.model.requests if "incident memory" in json.dumps(r["messages"])]
    assert len(asked) == 1 and f"resolution: {stored}" in json.dumps(asked)
    assert len([m for m in thread if button(m, REMEMBER_ACTION)]) == 1
