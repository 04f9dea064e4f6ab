"""Another MCP server's tools in Slack, through the whole bot (tests/world.py) and an MCP
server written with the SDK (tests/peers/mcp_servers.py, streamable HTTP on 127.0.0.1):
a role naming one of its reads lets the model use it, masked and audited; a tool the role
does not name is neither offered nor run; a tool configured as a write (though it claims
`readOnlyHint`) waits for its card and runs, exactly as previewed, only once approved."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from bot.approvals import copy as approval_copy
from bot.store.approvals import WriteAuditRepository
from bot.store.repositories import ToolAuditRepository
from tests.bot_processes import Launcher
from tests.peers.mcp_servers import PLANTED, HttpPeer
from tests.postgres import free_port
from tests.test_approval_crashes import card_settled
from tests.test_approvals import card_text, click, has_buttons, wait_card, wait_said
from tests.world import ADMIN_CHANNEL, ALICE, CAROL, MCP_AUTH, OPS_CHANNEL, SHOP_CHANNEL, World


@pytest.fixture(scope="module")
def grafana(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpPeer]:
    peer = HttpPeer(tmp_path_factory.mktemp("mcp-e2e") / "calls.jsonl")
    peer.start()
    yield peer
    peer.stop()


def with_grafana(peer: HttpPeer) -> dict[str, Any]:
    """A server that is down; SHOP_CHANNEL: two reads of the grafana server; OPS_CHANNEL:
    all its tools, writes approved by CAROL. Its reads by kelpie's config: get_*, search
    and list_*."""
    return {
        "mcp": {
            "servers": {
                "grafana": {
                    "url": peer.url,
                    "headers": {"Authorization": "KELPIE_TEST_MCP_AUTH"},
                    "read": ["get_*", "search", "list_*"],
                    "timeout_s": 10,
                },
                # Nothing listens there: kelpie starts without it and offers none of it.
                "down": {"url": f"http://127.0.0.1:{free_port()}/mcp", "timeout_s": 10},
            }
        },
        "roles": {
            "dashboards": {
                "tools": [
                    "read/*",
                    "mcp/grafana/get_dashboard",
                    "mcp/grafana/list_pods",
                    "mcp/down/*",
                ],
                "namespaces": ["shop"],
            },
            "annotator": {
                "tools": ["mcp/grafana/*"],
                "namespaces": ["shop"],
                "approval": {"approvers": {"users": [CAROL]}, "allow_requester": False},
            },
        },
        "channels": [
            {"match": {"id": SHOP_CHANNEL}, "role": "dashboards", "namespace": "shop"},
            {"match": {"id": OPS_CHANNEL}, "role": "annotator", "namespace": "shop"},
        ],
    }


def offered(world: World, index: int) -> set[str]:
    return {tool["function"]["name"] for tool in world.model.requests[index].get("tools", [])}


def thread_text(world: World, channel: str, thread_ts: str) -> str:
    return "\n".join(str(m.text or "") for m in world.slack.thread(channel, thread_ts))


async def test_a_roles_mcp_read_is_offered_masked_and_audited_and_no_other_tool(
    world: World, grafana: HttpPeer
):
    bot = await world.start_bot(with_grafana(grafana))
    world.model.reply_tool_calls([("mcp_grafana_get_dashboard", {"uid": "checkout"})])
    world.model.reply_tool_calls([("mcp_grafana_search", {"query": "x"})])
    world.model.reply_text("The checkout dashboard has 3 panels.")
    mention = await world.mention(SHOP_CHANNEL, ALICE, "what is on the checkout dashboard?")
    await world.wait_bot_replies(SHOP_CHANNEL, mention["ts"], 1)
    await world.model.wait_for_requests(3, timeout=20)
    await world.drain()

    # Offered: the one read the role names; neither the server's other read nor its write.
    names = offered(world, 0)
    assert "mcp_grafana_get_dashboard" in names
    assert not names & {"mcp_grafana_search", "mcp_grafana_create_annotation"}
    assert not [name for name in names if name.startswith("mcp_down_")]
    # The server answered with a planted secret: the model read it masked.
    results = [m for m in world.model.requests[2]["messages"] if m["role"] == "tool"]
    assert "dashboard checkout: 3 panels" in results[0]["content"]
    assert PLANTED not in str(world.model.requests[1:]) and PLANTED not in thread_text(
        world, SHOP_CHANNEL, mention["ts"]
    )
    # The unnamed tool was refused by the role gate; the server never heard of it.
    assert "channel role dashboards may not run mcp/grafana/search" in results[1]["content"]
    assert [call["tool"] for call in grafana.log.calls()].count("search") == 0
    call = grafana.log.calls("get_dashboard")[-1]
    assert call["args"] == {"uid": "checkout"} and call["seen"] == MCP_AUTH

    session = await bot.sessions.find(f"T0TEST:{SHOP_CHANNEL}:{mention['ts']}")
    assert session is not None
    audit = await ToolAuditRepository(bot.db).for_session(session.id)
    read = [row for row in audit if row.tool == "mcp/grafana/get_dashboard"]
    assert read[-1].decision == "ok" and json.loads(read[-1].arguments_json) == {"uid": "checkout"}
    denied = [row for row in audit if row.tool == "mcp/grafana/search"]
    assert (denied[-1].stage, denied[-1].decision) == ("channel role", "deny")


async def test_a_configured_write_needs_a_card_and_runs_as_previewed_once_approved(
    world: World, grafana: HttpPeer
):
    await world.start_bot(with_grafana(grafana))
    args = {"dashboard": "checkout", "text": "deploy 42"}
    world.model.reply_tool_calls(
        [("mcp_grafana_create_annotation", {**args, "reason": "mark the deploy"})]
    )
    world.model.reply_text("Annotated the checkout dashboard.")
    mention = await world.mention(OPS_CHANNEL, ALICE, "annotate the deploy on checkout")
    card = await wait_card(world, mention["ts"])
    text = card_text(card)
    # The preview is the exact call; the server's read-only claim is shown, not believed.
    assert '{"dashboard": "checkout", "text": "deploy 42"}' in text
    assert "readOnlyHint" in text and "mark the deploy" in text
    # Nothing rehearsed it: the card does not claim a server-side dry run.
    assert "Preview (the exact call, not sent yet)" in text and "dry run" not in text
    assert grafana.log.calls("create_annotation") == []

    await click(world, CAROL, card)
    await wait_said(world, mention["ts"], "Annotated the checkout dashboard.")
    await world.drain()
    assert [call["args"] for call in grafana.log.calls("create_annotation")] == [args]
    audits = await WriteAuditRepository(world.bots[0].db).all()
    assert [a.phase for a in audits] == ["intent", "outcome"]
    assert audits[0].approved_by == CAROL and audits[1].ok
    assert audits[0].target == "MCP tool//grafana/create_annotation"


async def test_a_write_cut_by_kill_9_mid_call_is_reported_unknown_and_never_run_again(
    world: World, grafana: HttpPeer, launch: Launcher
):
    """kelpie cannot read another server's tool back: after a crash mid-call it says it
    cannot tell whether the call took effect, never that it did not."""
    start = launch(with_grafana(grafana))
    bot = await start()
    before = len(grafana.log.calls("slow"))
    world.model.reply_tool_calls([("mcp_grafana_slow", {"reason": "warm the cache"})])
    world.model.reply_text("Called.")
    mention = await world.mention(OPS_CHANNEL, ALICE, "warm the grafana cache")
    card = await wait_card(world, mention["ts"], timeout=120)  # a fresh process imports LiteLLM
    await click(world, CAROL, card)
    # The call reached the server (which answers in an hour): the process dies mid-call.
    await world.slack.wait_for(lambda _: len(grafana.log.calls("slow")) > before, timeout=30)
    bot.kill()
    await start()
    said = await wait_said(world, mention["ts"], "cannot tell whether it was made", timeout=120)
    assert said.text.endswith(f": {approval_copy.RECONCILED_UNKNOWN}.")
    final = await card_settled(world, card)
    assert not has_buttons(final) and "unknown" in card_text(final)
    assert "not executed" not in thread_text(world, OPS_CHANNEL, mention["ts"]).lower()
    assert len(grafana.log.calls("slow")) == before + 1  # nothing ran it again


async def test_a_namespace_argument_is_judged_by_the_role_and_the_firewall(
    world: World, grafana: HttpPeer
):
    override = {**with_grafana(grafana), "firewall": {"deny_namespaces": ["kube-system"]}}
    override["channels"] = [
        *override["channels"],
        {"match": {"id": ADMIN_CHANNEL}, "role": "admin"},
    ]
    await world.start_bot(override)
    before = len(grafana.log.calls("list_pods"))
    # SHOP_CHANNEL's role reaches shop only; the admin's everything but the denied zone.
    for channel, namespace in ((SHOP_CHANNEL, "payments"), (ADMIN_CHANNEL, "kube-system")):
        world.model.reply_tool_calls([("mcp_grafana_list_pods", {"namespace": namespace})])
        world.model.reply_text("Not there.")
        asked = len(world.model.requests)
        mention = await world.mention(channel, ALICE, f"pods in {namespace}?")
        await world.wait_bot_replies(channel, mention["ts"], 1)
        await world.model.wait_for_requests(asked + 2, timeout=20)
    results = [
        [m for m in request["messages"] if m["role"] == "tool"][-1]["content"]
        for request in (world.model.requests[1], world.model.requests[3])
    ]
    assert "channel role dashboards may not touch namespace payments" in results[0]
    assert "namespace kube-system is a denied zone (kube-system)" in results[1]
    assert len(grafana.log.calls("list_pods")) == before
    # In the role's namespace (the channel's default when the model names none) it runs.
    world.model.reply_tool_calls([("mcp_grafana_list_pods", {"namespace": "shop"})])
    world.model.reply_text("web-0.")
    mention = await world.mention(SHOP_CHANNEL, ALICE, "pods in shop?")
    await wait_said_in(world, SHOP_CHANNEL, mention["ts"], "web-0.")
    assert grafana.log.calls("list_pods")[-1]["args"] == {"namespace": "shop"}


async def wait_said_in(world: World, channel: str, thread_ts: str, text: str) -> None:
    def said(server: Any) -> bool | None:
        found = any(m.is_bot and text in (m.text or "") for m in server.thread(channel, thread_ts))
        return True if found else None

    await world.slack.wait_for(said, timeout=20)


async def test_a_pre_tool_use_hook_matching_mcp_tools_sees_and_stops_the_call(
    world: World, grafana: HttpPeer
):
    seen = world.tmp / "hook.json"
    hook = {
        "match": "mcp/grafana/*",
        # Keeps the document it was given, then denies (exit 2).
        "command": ["/bin/sh", "-c", f"cat > {seen}; echo 'change freeze' >&2; exit 2"],
    }
    await world.start_bot({**with_grafana(grafana), "hooks": {"pre_tool_use": [hook]}})
    before = len(grafana.log.calls("get_dashboard"))
    world.model.reply_tool_calls([("mcp_grafana_get_dashboard", {"uid": "frozen"})])
    world.model.reply_text("A hook stopped it.")
    mention = await world.mention(SHOP_CHANNEL, ALICE, "the frozen dashboard?")
    await world.wait_bot_replies(SHOP_CHANNEL, mention["ts"], 1)
    await world.model.wait_for_requests(2, timeout=20)
    result = [m for m in world.model.requests[1]["messages"] if m["role"] == "tool"][-1]
    assert result["content"].startswith("Denied by pre-tool-use hook")
    document = json.loads(seen.read_text())
    assert (document["tool"], document["kind"], document["args"]) == (
        "mcp_grafana_get_dashboard",
        "read",
        {"uid": "frozen"},
    )
    assert len(grafana.log.calls("get_dashboard")) == before
