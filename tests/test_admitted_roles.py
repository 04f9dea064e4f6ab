"""A turn runs under what its own message was admitted under (role, cluster, namespace, and
whether its asker is a Slack Connect guest), judged again under the configuration running
when it runs and never wider than either: after a `kill -9` and a restart that takes a
queued turn over, after a decision on a card, and after the channel was given less."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from bot.app import tool_registry
from bot.config import RoleConfig
from bot.pipeline.roles import ChannelBinding, narrower, offered_tools, role_within
from bot.toolsets.kube.client import KubeClients
from tests.bot_processes import Start
from tests.peers.model_server import HangStep
from tests.test_approval_crashes import card_settled
from tests.test_approvals import card_text, click, real_writes, replicas, wait_card, wait_said
from tests.test_replayed_requests import rows
from tests.world import ALICE, BOB, CAROL, OPS_CHANNEL, World, merge

WRITES = {"scale_deployment", "restart_deployment", "delete_pod", "cordon_node"}
PARTNER = "T0PARTNER"  # another organisation's workspace (a Slack Connect guest's)
# A fresh process imports its libraries before its first answer: a ceiling, not a speed.
TURN_S = 120


def crashable(url: str) -> dict[str, Any]:
    """Short leases, follow-ups queued behind the running turn, guests get `viewer`; the
    OpenAI-wire client (no LiteLLM to import at each start)."""
    return {
        "database": {"url": url, "lease_s": 3},
        "slack": {"on_new_message": "queue", "external_users_role": "viewer"},
        "models": {"profiles": {"default": {"client": "openai-compatible"}}},
    }


def seen_by_model(request: dict[str, Any]) -> tuple[str, set[str]]:
    """The system prompt of a model request and the tools it offered."""
    system = str(request["messages"][0]["content"])
    return system, {tool["function"]["name"] for tool in request.get("tools", [])}


async def turns(url: str, want: list[str]) -> list[Any]:
    """The turns (state, role, external), oldest first, once their states are `want`."""
    sql = "SELECT state, role, external FROM turns ORDER BY created_at"
    for _ in range(300):
        found = await rows(url, sql)
        if [row[0] for row in found] == want:
            return [tuple(row) for row in found]
        await asyncio.sleep(0.1)
    raise AssertionError(f"the turns were {found}")


async def busy_thread_with_a_queued_follow_up(world: World, url: str, *, guest: bool) -> str:
    """ALICE's question in #shop-ops (operator) hangs at the model; a follow-up in its
    thread (BOB's, from another organisation if `guest`) waits, queued behind it."""
    world.model.enqueue(HangStep(300))
    question = world.slack.mention(OPS_CHANNEL, ALICE, "why is checkout slow?")
    await world.slack.deliver_event(question)
    thread = question["ts"]
    await world.model.wait_for_requests(1, timeout=TURN_S)
    follow = world.slack.mention(OPS_CHANNEL, BOB, "which pods run in shop?", thread_ts=thread)
    if guest:
        follow["user_team"] = PARTNER
    await world.slack.deliver_event(follow)
    await turns(url, ["running", "queued"])
    return thread


async def test_a_guests_queued_question_keeps_the_guests_role_after_a_kill_and_restart(
    world: World, launch: Callable[..., Start], database_url: str
):
    start = launch(crashable(database_url))
    bot = await start()
    thread = await busy_thread_with_a_queued_follow_up(world, database_url, guest=True)
    bot.kill()
    world.model.reply_text("Read-only answer.")

    await start()  # takes the dead process's turns over: closes one, runs the queued one
    await wait_said(world, thread, "Read-only answer.", timeout=TURN_S)
    system, offered = seen_by_model(world.model.requests[-1])
    # The guest's role, not the operator role of the thread ALICE started.
    assert "This channel's role: viewer." in system and "operator" not in system
    assert "list_pods" in offered and not offered & WRITES
    assert await turns(database_url, ["interrupted", "done"]) == [
        ("interrupted", "operator", False),
        ("done", "viewer", True),
    ]
    assert len(world.model.requests) == 2


async def test_a_channel_given_less_in_the_config_gives_its_existing_thread_less(
    world: World, launch: Callable[..., Start], database_url: str
):
    bot = await launch(crashable(database_url))()
    thread = await busy_thread_with_a_queued_follow_up(world, database_url, guest=False)
    bot.kill()
    # Restarted on a config that makes #shop-ops a viewer channel.
    channels = [
        {"match": {"id": OPS_CHANNEL}, "role": "viewer", "namespace": "shop"},
        *world.config_data["channels"],
    ]
    world.model.reply_text("Viewer answer.")
    await launch(merge(crashable(database_url), {"channels": channels}))()

    await wait_said(world, thread, "Viewer answer.", timeout=TURN_S)
    system, offered = seen_by_model(world.model.requests[-1])
    assert "This channel's role: viewer." in system and "operator" not in system
    assert "list_pods" in offered and not offered & WRITES
    # And no wider than it was admitted: the operator's namespaces, not the viewer's "*".
    assert "shop, team-*" in system
    # Admitted as operator; run as the viewer the channel is now.
    assert await turns(database_url, ["interrupted", "done"]) == [
        ("interrupted", "operator", False),
        ("done", "operator", False),
    ]


async def test_a_decision_turn_runs_under_the_role_its_proposing_turn_was_admitted_under(
    any_db_world: World,
):
    world = any_db_world  # on SQLite and on the real PostgreSQL
    await world.start_bot({"slack": {"external_users_role": "viewer"}})
    # A guest starts the thread in #shop-ops: its session is created under the guests' role.
    world.model.reply_text("Read-only answer.")
    opening = world.slack.mention(OPS_CHANNEL, BOB, "what runs in shop?")
    opening["user_team"] = PARTNER
    await world.slack.deliver_event(opening)
    thread = opening["ts"]
    await wait_said(world, thread, "Read-only answer.")
    await world.drain()
    # ALICE, of this workspace (operator), asks for a change there; CAROL approves it.
    args = {"namespace": "shop", "name": "checkout-api", "replicas": 5, "reason": "spike"}
    world.model.reply_tool_calls([("scale_deployment", args)])
    world.model.reply_text("Scaled checkout-api to 5.")
    await world.mention(OPS_CHANNEL, ALICE, "scale checkout-api to 5", thread_ts=thread)
    card = await wait_card(world, thread)
    await click(world, CAROL, card)
    await wait_said(world, thread, "Scaled checkout-api to 5.")
    await world.drain()

    guest, proposing, decision = (seen_by_model(r) for r in world.model.requests)
    assert "role: viewer" in guest[0] and not guest[1] & WRITES
    assert "role: operator" in proposing[0] and "scale_deployment" in proposing[1]
    # The turn after the decision: under ALICE's admission, not the session's (the guest's).
    assert "This channel's role: operator." in decision[0]
    assert "scale_deployment" in decision[1]
    world.model.assert_script_consumed()


async def test_a_guests_card_runs_under_the_guests_role_as_the_config_gives_it_at_the_click(
    any_db_world: World,
):
    """Guests may propose changes in shop; a restart takes writes from them. CAROL's
    approval then runs nothing: the card is judged under the guests' role as it is now, not
    under the operator role of the channel it was proposed in."""
    world = any_db_world  # on SQLite and on the real PostgreSQL
    guests = {"tools": ["read/*", "write/*"], "namespaces": ["shop"]}
    guests["approval"] = {"approvers": {"users": [CAROL]}}
    bot = await world.start_bot(
        {"roles": {"guests": guests}, "slack": {"external_users_role": "guests"}}
    )
    args = {"namespace": "shop", "name": "checkout-api", "replicas": 5, "reason": "spike"}
    world.model.reply_tool_calls([("scale_deployment", args)])
    world.model.reply_text("Not done: see the card.")
    asked = world.slack.mention(OPS_CHANNEL, BOB, "scale checkout-api to 5")
    asked["user_team"] = PARTNER
    await world.slack.deliver_event(asked)
    card = await wait_card(world, asked["ts"])
    await world.drain()
    await world.stop_bot(bot)
    await world.start_bot({"roles": {"guests": {**guests, "tools": ["read/*"]}}})

    await click(world, CAROL, card)
    said = await wait_said(world, asked["ts"], "Not done: see the card.")
    assert said is not None
    final = await card_settled(world, card)
    assert "not executed" in card_text(final) and "may not run write/scale_deployment" in (
        card_text(final)
    )
    assert real_writes(world) == [] and replicas(world) == 3


def role(tools: list[str], namespaces: list[str], **more: Any) -> RoleConfig:
    return RoleConfig.model_validate({"tools": tools, "namespaces": namespaces, **more})


VIEWER = role(["read/*"], ["*"])
OPERATOR = role(["read/*", "write/*"], ["shop", "team-*"])
SHOP_READER = role(["read/*"], ["shop"])


def test_the_narrower_of_the_admitted_and_the_current_binding_is_used_never_a_wider_one():
    tools = tool_registry(KubeClients({})).all()
    admitted = ChannelBinding("operator", OPERATOR, "prod", "shop")
    less = ChannelBinding("shop-reader", SHOP_READER, "prod", None)
    # The configuration gives less now: less (with the narrower default namespace).
    assert narrower(admitted, less, tools) == replace(less, namespace="shop")
    # It gives more now: still the admitted one.
    assert narrower(less, admitted, tools) == replace(less, namespace="shop")
    # Neither within the other (reads everywhere, writes in shop and team-*): what both
    # allow, under the current role's name.
    both = narrower(admitted, ChannelBinding("viewer", VIEWER, "prod", None), tools)
    assert both is not None and both.role_name == "viewer" and both.namespace == "shop"
    assert both.role.namespaces == ["shop", "team-*"]
    offered = {tool.name for tool in offered_tools(both.role, tools)}
    assert "list_pods" in offered and not offered & WRITES
    # Another cluster or another Kubernetes identity: nothing is granted as such.
    assert narrower(less, replace(less, cluster="staging"), tools) is None
    acting = role(["read/*"], ["shop"], kubernetes={"impersonate": {"user": "reader"}})
    assert narrower(less, replace(less, role=acting), tools) is None
    # Looser approvals are not within; a glob is within only "*" or itself, a name
    # within any glob that matches it.
    loose = role(["read/*"], ["shop"], approval={"allow_requester": True})
    assert not role_within(loose, SHOP_READER, tools) and role_within(SHOP_READER, loose, tools)
    assert role_within(role(["read/*"], ["team-a"]), OPERATOR, tools)
    assert not role_within(role(["read/*"], ["team-a*"]), OPERATOR, tools)
