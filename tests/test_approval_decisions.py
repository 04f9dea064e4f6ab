"""Decisions on approval cards as a production change-approval system must make them: who
counts as a requester, re-checks against the configuration running at the click, one
decision per card under races, and outcomes that land whatever Slack or the database do."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import sys
from pathlib import Path
from typing import Any

from sqlmodel import col, select

from bot.agent.continuation import DECISION_PREFIX
from bot.store.approvals import ApprovalRepository, WriteAuditRepository
from bot.store.tables import MessageRow, ToolAuditRow
from bot.values import ApprovalDecision, ApprovalState, DecisionKind
from tests.peers.model_server import HangStep, TextStep
from tests.test_approvals import (
    approval_id,
    card_now,
    card_text,
    click,
    decision_note,
    has_buttons,
    propose_scale,
    real_writes,
    replicas,
    wait_card,
    wait_said,
)
from tests.world import ALICE, BOB, CAROL, DAVE, OPS_CHANNEL, World

NATIVE = {"slack": {"streaming": "native"}}
TURN_S = 30


def scale_call(replicas: int = 5) -> tuple[str, dict[str, Any]]:
    args = {"namespace": "shop", "name": "checkout-api", "replicas": replicas, "reason": "load"}
    return ("scale_deployment", args)


async def test_everyone_who_asked_is_a_requester_and_none_of_them_approves(world: World):
    await world.start_bot()
    world.model.reply_text("How many replicas?")
    world.model.reply_tool_calls([scale_call()])
    world.model.reply_text("Scaled.")
    mention = await world.mention(OPS_CHANNEL, ALICE, "checkout-api needs more capacity")
    await wait_said(world, mention["ts"], "How many replicas?")
    # A bystander answers; the proposal comes in the turn her reply started.
    reply = world.slack.message(OPS_CHANNEL, BOB, "5 should do", thread_ts=mention["ts"])
    await world.slack.deliver_event(reply)
    card = await wait_card(world, mention["ts"])
    text = card_text(card)
    assert f"<@{ALICE}>" in text and f"<@{BOB}>" in text  # the card lists both
    await click(world, ALICE, card)  # who first asked
    await click(world, BOB, card)  # who asked last
    await world.slack.wait_for(
        lambda s: s.ephemerals(OPS_CHANNEL, ALICE) and s.ephemerals(OPS_CHANNEL, BOB)
    )
    assert "someone else has to decide" in world.slack.ephemerals(OPS_CHANNEL, ALICE)[0].text
    assert real_writes(world) == [] and has_buttons(await card_now(world, card))
    await click(world, CAROL, card)
    await wait_said(world, mention["ts"], "Scaled.")
    await world.drain()
    assert len(real_writes(world)) == 1 and replicas(world) == 5


async def test_a_click_after_the_role_was_narrowed_and_kelpie_restarted_runs_nothing(
    world: World,
):
    bot = await world.start_bot()
    mention, card = await propose_scale(world, then="The change was refused.")
    await world.stop_bot(bot)
    await world.start_bot({"roles": {"operator": {"namespaces": ["team-*"]}}})
    await click(world, CAROL, card)
    said = await wait_said(world, mention["ts"], "not executed")
    assert "may not touch namespace shop" in said.text
    await wait_said(world, mention["ts"], "The change was refused.")
    await world.drain()
    assert real_writes(world) == [] and replicas(world) == 3
    final = await card_now(world, card)
    assert "Not executed" in card_text(final) and not has_buttons(final)
    assert "NOT executed" in decision_note(world)
    audits = await WriteAuditRepository(world.bots[0].db).all()
    assert audits == []  # nothing was even attempted


async def test_an_approver_removed_by_the_new_config_may_not_decide(world: World):
    bot = await world.start_bot()
    _, card = await propose_scale(world)
    await world.stop_bot(bot)
    await world.start_bot({"roles": {"operator": {"approval": {"approvers": {"users": []}}}}})
    await click(world, CAROL, card)
    await world.slack.wait_for(lambda s: s.ephemerals(OPS_CHANNEL, CAROL))
    assert "may not decide" in world.slack.ephemerals(OPS_CHANNEL, CAROL)[0].text
    await click(world, DAVE, card)  # still an approver through the SRE group
    await world.slack.wait_for(
        lambda s: "Outcome" in card_text(s.get_message(OPS_CHANNEL, card.ts))
    )
    await world.drain()
    assert len(real_writes(world)) == 1


async def test_slack_refusing_the_card_update_still_shows_the_executed_change(world: World):
    await world.start_bot()
    mention, card = await propose_scale(world, then="Scaled anyway.")
    identifier = approval_id(card)
    world.slack.fail("chat.update", "internal_error")
    await click(world, CAROL, card)
    said = await wait_said(world, mention["ts"], "scaled shop/checkout-api to 5 replicas")
    assert "Scale deployment shop/checkout-api from 3 to 5" in said.text
    await wait_said(world, mention["ts"], "Scaled anyway.")
    await world.drain()
    assert len(real_writes(world)) == 1 and replicas(world) == 5
    approval = await ApprovalRepository(world.bots[0].db).get(identifier)
    assert approval is not None and approval.outcome and "scaled" in approval.outcome
    world.slack.clear_faults()


async def test_a_rate_limited_card_update_is_retried(world: World):
    await world.start_bot()
    mention, card = await propose_scale(world, then="Done.")
    world.slack.rate_limit("chat.update", retry_after=1, times=2)
    await click(world, CAROL, card)
    await world.slack.wait_for(
        lambda s: "Outcome" in card_text(s.get_message(OPS_CHANNEL, card.ts)), timeout=30
    )
    await wait_said(world, mention["ts"], "Done.")
    await world.drain()
    assert not has_buttons(await card_now(world, card))


async def test_a_locked_database_at_execution_still_records_the_outcome(world: World):
    bot = await world.start_bot()
    mention, card = await propose_scale(world, then="Done.")
    identifier = approval_id(card)
    world.kube.delay(r"/deployments/checkout-api/scale$", 1.0)
    await click(world, CAROL, card)
    await world.slack.wait_for(lambda s: real_writes(world) != [])
    # Another process holds the write lock while the change completes.
    locker = sqlite3.connect(world.tmp / "k.db", timeout=1)
    locker.execute("BEGIN EXCLUSIVE")
    await asyncio.sleep(6.0)  # longer than the store's busy timeout
    locker.rollback()
    locker.close()
    await world.slack.wait_for(
        lambda s: "Outcome" in card_text(s.get_message(OPS_CHANNEL, card.ts)), timeout=30
    )
    await wait_said(world, mention["ts"], "Done.")
    await world.drain()
    approval = await ApprovalRepository(bot.db).get(identifier)
    assert approval is not None and approval.outcome and "scaled" in approval.outcome
    audits = await WriteAuditRepository(bot.db).all()
    assert [a.phase for a in audits] == ["intent", "outcome"]


async def test_a_click_racing_the_expiry_decides_once(world: World):
    bot = await world.start_bot({"roles": {"operator": {"approval": {"timeout_s": 2}}}})
    mention, card = await propose_scale(world, then="Decided.")
    world.model.reply_text("Decided again?")
    await asyncio.sleep(1.9)
    approve = ApprovalDecision(DecisionKind.APPROVE, CAROL, OPS_CHANNEL)
    expire = ApprovalDecision(DecisionKind.EXPIRE)
    identifier = approval_id(card)
    await asyncio.sleep(0.1)
    results = await asyncio.gather(
        bot.approvals.resume(identifier, approve),
        bot.approvals.resume(identifier, expire),
        bot.approvals.sweep(),
    )
    decided = [r for r in results[:2] if r.result.value == "decided"]
    assert len(decided) <= 1  # the sweep may be the one that decided
    await wait_said(world, mention["ts"], "Decided.")
    await world.drain()
    # Exactly one decision: one state on the row, one note in the conversation, one on the
    # card, and the cluster agrees with it.
    approval = await ApprovalRepository(bot.db).get(identifier)
    assert approval is not None and approval.outcome
    async with bot.db.sessions() as session:
        rows = (await session.exec(select(MessageRow))).all()
    notes = [r.content or "" for r in rows if (r.content or "").startswith(DECISION_PREFIX)]
    assert len(notes) == 1
    final = await card_now(world, card)
    shown = [label for label in ("Approved", "Expired") if label in card_text(final)]
    assert not has_buttons(final)
    wrote = len(real_writes(world))
    if approval.status is ApprovalState.APPROVED:
        assert (shown, wrote) == (["Approved"], 1) and f"approved by <@{CAROL}>" in notes[0]
        assert replicas(world) == 5
    else:
        assert approval.status is ApprovalState.EXPIRED
        assert (shown, wrote) == (["Expired"], 0) and "expired" in notes[0]
    # Exactly one decision turn ran: the second scripted answer was never asked for.
    assert not any(
        "Decided again?" in (m.text or "") for m in world.slack.thread(OPS_CHANNEL, mention["ts"])
    )


async def test_the_pipeline_order_as_wired_in_the_running_app(world: World):
    bot = await world.start_bot({"guardian": {"enabled": True, "model_profile": "default"}})
    assert bot.core.pipeline.order == [
        "abort",
        "provider-native",
        "channel role",
        "pre-tool-use hook",
        "firewall",
        "guardian",
        "permission",
        "approval",
        "execute",
        "mask",
        "post-tool-use hook",
        "audit",
    ]


POST_HOOK = """
import sys
from pathlib import Path
with Path(sys.argv[1]).open("a") as f:
    f.write(sys.stdin.read().replace("\\n", " ") + "\\n")
"""


async def test_an_approved_write_passes_the_same_tail_post_hook_and_audit(
    world: World, tmp_path: Path
):
    script, seen = tmp_path / "post.py", tmp_path / "post.jsonl"
    script.write_text(POST_HOOK)
    hook = {"match": "write/*", "command": [sys.executable, str(script), str(seen)]}
    bot = await world.start_bot({"hooks": {"post_tool_use": [hook]}})
    mention, card = await propose_scale(world, then="Scaled.")
    await click(world, CAROL, card)
    await wait_said(world, mention["ts"], "Scaled.")
    await world.drain()
    for background in bot.core.background:
        await background.drain()
    documents = [json.loads(line) for line in seen.read_text().splitlines()]
    # The proposal (the card is up) and the approved call's own result (hooks run in the
    # background, so in either order).
    by_status = {d["result"]["status"]: d for d in documents}
    assert len(documents) == 2 and sorted(by_status) == ["ok", "pending"]
    assert by_status["ok"]["tool"] == "scale_deployment"
    assert by_status["ok"]["result"]["summary"] == "scaled shop/checkout-api to 5 replicas"
    assert len(real_writes(world)) == 1 and replicas(world) == 5
    # The audit holds both passes through the pipeline: up to the card, then from the
    # re-check at the click to the write.
    async with bot.db.sessions() as session:
        audit = (await session.exec(select(ToolAuditRow).order_by(col(ToolAuditRow.id)))).all()
    trail = [(row.stage, row.decision) for row in audit]
    card_up = trail.index(("approval", "pending"))
    assert trail[card_up - 1] == ("permission", "needs_approval")
    resumed = trail[card_up + 1 :]
    assert [stage for stage, _ in resumed][:3] == ["abort", "provider-native", "channel role"]
    assert resumed[-3:] == [
        ("permission", "needs_approval"),
        ("approval", "allow"),
        ("execute", "ok"),
    ]
    assert audit[-2].reason == f"approved by {CAROL}"


async def ask_in_thread_while_a_card_waits(world: World, thread_ts: str, user: str) -> None:
    """`user` asks in the thread; the model holds the answer, so the turn runs (processing)."""
    asked = len(world.model.requests)
    reply = world.slack.message(OPS_CHANNEL, user, "what would that change?", thread_ts=thread_ts)
    await world.slack.deliver_event(reply)
    await world.model.wait_for_requests(asked + 1, timeout=TURN_S)
    await world.slack.wait_for(
        lambda s: s.session_status(OPS_CHANNEL, thread_ts) == "processing", timeout=TURN_S
    )


async def test_a_stop_withdraws_the_waiting_card_only_for_an_approver(world: World):
    world.model.reply_tool_calls([scale_call()])
    world.model.enqueue(HangStep(20, then=TextStep("never shown")))
    world.model.enqueue(HangStep(20, then=TextStep("never shown either")))
    await world.start_bot(NATIVE)
    mention = await world.mention(OPS_CHANNEL, ALICE, "scale checkout-api to 5")
    card = await wait_card(world, mention["ts"])
    identifier = approval_id(card)

    # BOB neither asked for the change nor approves: his stop ends his own question's turn
    # and leaves the card alone.
    await ask_in_thread_while_a_card_waits(world, mention["ts"], BOB)
    await world.slack.press_session_stop(OPS_CHANNEL, mention["ts"], BOB)
    await wait_said(world, mention["ts"], f"Stopped by <@{BOB}>", timeout=TURN_S)
    assert has_buttons(await card_now(world, card))

    # CAROL approves writes in this channel: her stop withdraws the card too.
    await ask_in_thread_while_a_card_waits(world, mention["ts"], BOB)
    await world.slack.press_session_stop(OPS_CHANNEL, mention["ts"], CAROL)
    await world.slack.wait_for(
        lambda s: "Withdrawn" in card_text(s.get_message(OPS_CHANNEL, card.ts)), timeout=TURN_S
    )
    await world.drain()
    final = await card_now(world, card)
    assert f"by <@{CAROL}>" in card_text(final) and not has_buttons(final)
    assert real_writes(world) == [] and replicas(world) == 3
    approval = await ApprovalRepository(world.bots[0].db).get(identifier)
    assert approval is not None and approval.outcome == f"not executed: withdrawn by <@{CAROL}>"


async def test_the_requesters_stop_withdraws_her_card_even_in_someone_elses_turn(world: World):
    world.model.reply_tool_calls([scale_call()])
    world.model.enqueue(HangStep(3, then=TextStep("Bob's answer.")))
    await world.start_bot(NATIVE)
    mention = await world.mention(OPS_CHANNEL, ALICE, "scale checkout-api to 5")
    card = await wait_card(world, mention["ts"])
    await ask_in_thread_while_a_card_waits(world, mention["ts"], BOB)
    # ALICE may not stop BOB's question, but the card waiting in her name is hers to withdraw.
    await world.slack.press_session_stop(OPS_CHANNEL, mention["ts"], ALICE)
    await world.slack.wait_for(
        lambda s: "Withdrawn" in card_text(s.get_message(OPS_CHANNEL, card.ts)), timeout=TURN_S
    )
    await world.drain()
    final = await card_now(world, card)
    assert f"by <@{ALICE}>" in card_text(final) and not has_buttons(final)
    assert real_writes(world) == [] and replicas(world) == 3


def acting_as(user: str, *groups: str) -> dict[str, Any]:
    impersonate = {"user": user, "groups": list(groups)}
    return {"roles": {"operator": {"kubernetes": {"impersonate": impersonate}}}}


async def test_a_click_after_the_roles_kubernetes_identity_changed_runs_nothing(world: World):
    bot = await world.start_bot(acting_as("alice", "oncall"))
    mention, card = await propose_scale(world, then="The change was refused.")
    assert "as Kubernetes user alice (groups oncall)" in card_text(card)
    await world.stop_bot(bot)
    bot = await world.start_bot(acting_as("bob", "team-b"))
    await click(world, CAROL, card)
    said = await wait_said(world, mention["ts"], "not executed")
    why = (
        "now acts as Kubernetes user bob (groups team-b), "
        "not as Kubernetes user alice (groups oncall)"
    )
    assert why in said.text
    await wait_said(world, mention["ts"], "The change was refused.")
    await world.drain()
    assert real_writes(world) == [] and replicas(world) == 3
    final = await card_now(world, card)
    assert why in card_text(final) and not has_buttons(final)
    assert await WriteAuditRepository(world.bots[-1].db).all() == []

    # Asked again, the card is made as bob; a restart that keeps bob still runs it as bob.
    again, card = await propose_scale(world, then="Scaled as bob.")
    assert "as Kubernetes user bob (groups team-b)" in card_text(card)
    await world.stop_bot(bot)
    await world.start_bot(acting_as("bob", "team-b"))
    await click(world, CAROL, card)
    await wait_said(world, again["ts"], "Scaled as bob.")
    await world.drain()
    assert replicas(world) == 5
    assert [w.acting_as for w in real_writes(world)] == [("bob", ("team-b",))]
