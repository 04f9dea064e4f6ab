"""Channel roles and the security pipeline end to end: what the model is offered, what the
cluster receives, what the thread and the slash command show."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import pytest

from bot.store.repositories import ToolAuditRepository
from tests.world import (
    ADMIN_CHANNEL,
    ALICE,
    CAROL,
    DEV_CHANNEL,
    OPS_CHANNEL,
    SHOP_CHANNEL,
    World,
)


def visible(message: Any) -> str:
    """Everything a person can read in a bot message: text, blocks, streamed task lines."""
    parts = [message.text or ""]
    for block in message.blocks or []:
        parts.append(json.dumps(block))
    for task in getattr(message, "tasks", {}).values():
        parts.append(json.dumps(task))
    return "\n".join(parts)


def thread_text(world: World, channel: str, thread_ts: str) -> str:
    return "\n".join(visible(m) for m in world.slack.thread(channel, thread_ts) if m.is_bot)


async def ask(world: World, channel: str, text: str, user: str = ALICE) -> dict[str, Any]:
    mention = await world.mention(channel, user, text)
    await world.wait_bot_replies(channel, mention["ts"], 1)
    await world.drain()
    return mention


def offered(world: World, request_index: int = 0) -> set[str]:
    return {t["function"]["name"] for t in world.model.requests[request_index].get("tools", [])}


async def test_viewer_channel_cannot_write_and_sees_why(world: World):
    world.model.reply_tool_calls([("delete_pod", {"namespace": "shop", "name": "checkout-api-0"})])
    world.model.reply_text("I may not delete pods from this channel.")
    bot = await world.start_bot()
    mention = await ask(world, SHOP_CHANNEL, "delete the crashing pod")
    # The model was never offered a write tool here.
    names = offered(world)
    assert "list_pods" in names
    assert not names & {"delete_pod", "scale_deployment", "restart_deployment", "cordon_node"}
    # Its call was denied by the role gate, nothing reached the cluster, the thread says why.
    result = world.model.requests[1]["messages"][-1]["content"]
    assert "channel role viewer may not run write/delete_pod" in result
    assert world.kube.writes() == []
    assert not [r for r in world.kube.requests if "/pods" in r.path]
    assert "may not run write/delete_pod" in thread_text(world, SHOP_CHANNEL, mention["ts"])
    session = await bot.sessions.find(f"T0TEST:{SHOP_CHANNEL}:{mention['ts']}")
    assert session is not None
    audit = await ToolAuditRepository(bot.db).for_session(session.id)
    assert (audit[-1].stage, audit[-1].decision) == ("channel role", "deny")


async def test_operator_may_not_touch_namespaces_outside_its_role(world: World):
    world.model.reply_tool_calls([("list_pods", {"namespace": "dev-a"})])
    world.model.reply_text("dev-a is outside this channel.")
    await world.start_bot()
    await ask(world, OPS_CHANNEL, "pods in dev-a?")
    result = world.model.requests[1]["messages"][-1]["content"]
    assert "may not touch namespace dev-a" in result
    assert not [r for r in world.kube.requests if "dev-a" in r.path]
    # The prompt told the model where it may go, so it need not guess.
    system = world.model.requests[0]["messages"][0]["content"]
    assert "operator" in system and "shop, team-*" in system


async def test_firewall_denies_kube_system_even_for_admin_and_secrets_always(world: World):
    # One call per round: the low tier accepts one call per response.
    world.model.reply_tool_calls([("list_pods", {"namespace": "kube-system"})])
    world.model.reply_tool_calls([("list_events", {"namespace": "shop", "kind": "Secret"})])
    world.model.reply_text("kube-system and secrets are off limits.")
    await world.start_bot({"agent": {"max_iterations": 3}})
    await ask(world, ADMIN_CHANNEL, "show kube-system pods and secret events")
    tool_results = [m for m in world.model.requests[-1]["messages"] if m["role"] == "tool"]
    contents = " ".join(m["content"] for m in tool_results)
    assert "firewall" in contents and "kube-system" in contents
    assert "Secret" in contents
    assert not [r for r in world.kube.requests if "kube-system" in r.path]
    assert not [r for r in world.kube.requests if "secret" in r.path.lower()]
    assert not [r for r in world.kube.requests if "Secret" in json.dumps(r.query)]


def write_hook(tmp: Path, name: str, body: str) -> str:
    path = tmp / name
    path.write_text("#!/usr/bin/env bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


@pytest.mark.parametrize(
    ("script", "timeout_s", "reason"),
    [
        (
            'cat > /dev/null; echo \'{"behavior":"deny","reason":"change freeze"}\'',
            5,
            "change freeze",
        ),
        ("cat > /dev/null; sleep 5", 0.5, "timed out"),
        ("cat > /dev/null; exit 1", 5, "exit"),
        ("cat > /dev/null; echo not-json", 5, "hook"),
    ],
    ids=["deny", "timeout", "crash", "garbage"],
)
async def test_pre_tool_use_hooks_fail_closed(world: World, script, timeout_s, reason):
    hook = write_hook(world.tmp, "hook.sh", script + "\n")
    world.model.reply_tool_calls([("list_pods", {"namespace": "shop"})])
    world.model.reply_text("A hook stopped me.")
    await world.start_bot(
        {
            "hooks": {
                "pre_tool_use": [
                    {"match": "read/list_pods", "command": [hook], "timeout_s": timeout_s}
                ]
            }
        }
    )
    await ask(world, SHOP_CHANNEL, "pods?")
    result = world.model.requests[1]["messages"][-1]["content"]
    assert "pre-tool-use hook" in result and reason in result
    assert not [r for r in world.kube.requests if r.path.endswith("/pods")]


async def test_hook_receives_the_call_and_secrets_stay_out_of_its_environment(world: World):
    record = world.tmp / "hook-input.json"
    environment = world.tmp / "hook-env.txt"
    hook = write_hook(world.tmp, "record.sh", f"cat > {record}; env > {environment}\n")
    world.model.reply_tool_calls([("list_pods", {"namespace": "shop"})])
    world.model.reply_text("ok")
    await world.start_bot({"hooks": {"pre_tool_use": [{"match": "read/*", "command": [hook]}]}})
    mention = await ask(world, SHOP_CHANNEL, "pods?")
    document = json.loads(record.read_text())
    assert document["tool"] == "list_pods" and document["kind"] == "read"
    assert document["args"] == {"namespace": "shop"}
    assert document["user"] == ALICE and document["role"] == "viewer"
    assert document["channel"] == SHOP_CHANNEL and mention["ts"] in document["session"]
    env = environment.read_text()
    assert "xoxb-" not in env and "sk-test-model-key" not in env
    assert [r.path for r in world.kube.requests if r.path.endswith("/pods")]


async def test_renamed_channel_is_picked_up(world: World):
    world.model.reply_text("dev answer")
    await world.start_bot()
    first = await ask(world, DEV_CHANNEL, "hi")
    assert "dev answer" in thread_text(world, DEV_CHANNEL, first["ts"])
    world.slack.set_channel(DEV_CHANNEL, "misc")
    await world.slack.deliver_event(
        {"type": "channel_rename", "channel": {"id": DEV_CHANNEL, "name": "misc"}}
    )
    second = await ask(world, DEV_CHANNEL, "hi again")
    assert "not enabled" in thread_text(world, DEV_CHANNEL, second["ts"])
    assert len(world.model.requests) == 1


async def slash(world: World, channel: str, text: str, user: str = ALICE) -> str:
    payload = world.slack.slash_command("/kelpie", text, user, channel)
    await world.slack.deliver("slash_commands", payload)
    posts = await world.slack.wait_for(lambda s: s.responses_to(payload["response_url"]))
    return str(posts[-1].body.get("text"))


async def test_kelpie_role_shows_each_channels_role(any_db_world: World):
    world = any_db_world  # on SQLite and on the real PostgreSQL
    await world.start_bot()
    viewer = await slash(world, SHOP_CHANNEL, "role")
    assert "`viewer`" in viewer and "`shop`" in viewer and "list_pods" in viewer
    assert "delete_pod" not in viewer and "Writes:* none" in viewer
    operator = await slash(world, OPS_CHANNEL, "role")
    assert "`operator`" in operator and "`team-*`" in operator
    assert "scale_deployment" in operator
    assert f"<@{CAROL}>" in operator and "<!subteam^S0SRE>" in operator
    assert "not the person who asked" in operator
    help_text = await slash(world, OPS_CHANNEL, "help")
    assert "approval card" in help_text
    assert "read-only" in await slash(world, SHOP_CHANNEL, "help")
    assert "not enabled" in await slash(world, "C0RANDOM", "role")


async def test_session_hooks_run_at_session_start_and_turn_end(world: World):
    started = world.tmp / "started.json"
    ended = world.tmp / "ended.json"
    start_hook = write_hook(world.tmp, "start.sh", f"cat > {started}\n")
    end_hook = write_hook(world.tmp, "end.sh", f"cat >> {ended}; echo >> {ended}\n")
    world.model.reply_text("first")
    world.model.reply_text("second")
    bot = await world.start_bot(
        {
            "hooks": {
                "session_start": [{"command": [start_hook]}],
                "session_end": [{"command": [end_hook]}],
            }
        }
    )
    mention = await ask(world, SHOP_CHANNEL, "one")
    follow = world.slack.message(SHOP_CHANNEL, ALICE, "two", thread_ts=mention["ts"])
    await world.slack.deliver_event(follow)
    await world.wait_bot_replies(SHOP_CHANNEL, mention["ts"], 4)
    await world.drain()
    for hooks in bot.core.background:
        await hooks.drain()
    start_doc = json.loads(started.read_text())
    assert start_doc["event"] == "session_start" and mention["ts"] in start_doc["session"]
    end_docs = [json.loads(line) for line in ended.read_text().splitlines() if line.strip()]
    assert [doc["event"] for doc in end_docs] == ["session_end", "session_end"]
