"""The walking skeleton end to end: Slack peer → Bolt → agent → LiteLLM → model peer, tools
on the official Kubernetes client → cluster peer, answers back in the Slack thread."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import yaml

from bot.values import Role
from tests.peers.model_server import HangStep, TextStep
from tests.world import (
    ALICE,
    BOB,
    DEV_CHANNEL,
    MODEL_KEY,
    RANDOM_CHANNEL,
    SHOP_CHANNEL,
    World,
    environ,
)


def pod_lists(world: World) -> list:
    return [r for r in world.kube.requests if r.method == "GET" and r.path.endswith("/pods")]


async def test_mention_runs_a_tool_and_answers_in_the_thread(any_db_world: World):
    world = any_db_world  # on SQLite and on the real PostgreSQL
    world.model.reply_tool_calls([("list_pods", {"namespace": "shop"})])
    world.model.reply_text("checkout-api has one pod in CrashLoopBackOff (OOMKilled).")
    await world.start_bot()
    mention = await world.mention(SHOP_CHANNEL, ALICE, "why is checkout-api crashlooping?")

    replies = await world.wait_bot_replies(SHOP_CHANNEL, mention["ts"], 2)
    await world.drain()
    replies = [m for m in world.slack.thread(SHOP_CHANNEL, mention["ts"]) if m.is_bot]
    progress, answer = replies[0], replies[-1]
    assert all(m.thread_ts == mention["ts"] for m in replies)
    assert "`list_pods` ns=shop ✓" in progress.text
    assert (
        "pods" in progress.text.split("✓", 1)[1]
    )  # the one-line result, e.g. "4 pods, 1 not ready"
    assert answer.text == "checkout-api has one pod in CrashLoopBackOff (OOMKilled)."
    # The cluster received exactly that list call.
    assert [r.path for r in pod_lists(world)] == ["/api/v1/namespaces/shop/pods"]
    # The model received the tool result in its second request, and only offered tools.
    second = world.model.requests[1]
    tool_message = second["messages"][-1]
    assert tool_message["role"] == "tool" and "checkout-api" in tool_message["content"]
    offered = {tool["function"]["name"] for tool in world.model.requests[0]["tools"]}
    assert "list_pods" in offered and "pod_logs" in offered
    world.model.assert_script_consumed()


async def test_http_mode_signed_event_runs_and_bad_signature_is_refused(world: World):
    world.model.reply_text("All good in shop.")
    bot = await world.start_bot({"slack": {"mode": "http"}})
    url = f"http://127.0.0.1:{bot.http_port}/slack/events"
    mention = world.slack.mention(SHOP_CHANNEL, ALICE, "is shop healthy?")
    body = world.slack.event_envelope_payload(mention)

    status, _ = await world.slack.post_signed(url, body, signing_secret="wrong-secret")
    assert status == 401
    old = world.slack.event_envelope_payload(mention)
    status, _ = await world.slack.post_signed(url, old, timestamp=int(time.time()) - 600)
    assert status == 401
    assert world.model.requests == []

    status, _ = await world.slack.post_signed(url, body)
    assert status == 200
    replies = await world.wait_bot_replies(SHOP_CHANNEL, mention["ts"], 2)
    await world.drain()
    assert replies[-1].text == "All good in shop."
    assert len(world.model.requests) == 1


async def test_follow_up_carries_the_earlier_turn_also_after_restart(any_db_world: World):
    world = any_db_world  # on SQLite and on the real PostgreSQL
    world.model.reply_text("First answer: 3 replicas.")
    world.model.reply_text("Second answer.")
    world.model.reply_text("Third answer, after a restart.")
    bot = await world.start_bot()
    mention = await world.mention(SHOP_CHANNEL, ALICE, "how many replicas has checkout-api?")
    await world.wait_bot_replies(SHOP_CHANNEL, mention["ts"], 2)
    await world.drain()

    # A reply in the thread without a mention continues the session.
    follow_up = world.slack.message(SHOP_CHANNEL, BOB, "and why?", thread_ts=mention["ts"])
    await world.slack.deliver_event(follow_up)
    await world.wait_bot_replies(SHOP_CHANNEL, mention["ts"], 4)
    await world.drain()
    sent = [m["content"] for m in world.model.requests[1]["messages"]]
    assert any("how many replicas" in c for c in sent)
    assert "First answer: 3 replicas." in sent
    assert "and why?" in sent[-1]

    await world.stop_bot(bot)
    await world.start_bot()
    again = world.slack.message(SHOP_CHANNEL, ALICE, "still?", thread_ts=mention["ts"])
    await world.slack.deliver_event(again)
    await world.wait_bot_replies(SHOP_CHANNEL, mention["ts"], 6)
    await world.drain()
    sent = [m["content"] for m in world.model.requests[2]["messages"]]
    assert "First answer: 3 replicas." in sent and "Second answer." in sent
    assert any("and why?" in c for c in sent)
    world.model.assert_script_consumed()


async def test_dm_is_its_own_session_and_unlisted_channel_is_not_enabled(world: World):
    world.model.reply_text("Hello in private.")
    bot = await world.start_bot()
    unlisted = await world.mention(RANDOM_CHANNEL, ALICE, "help?")
    replies = await world.wait_bot_replies(RANDOM_CHANNEL, unlisted["ts"], 1)
    assert replies[0].text.startswith("kelpie is not enabled in this channel")

    dm = world.slack.im_message(ALICE, "what runs in shop?")
    await world.slack.deliver_event(dm)
    replies = await world.wait_bot_replies(dm["channel"], dm["ts"], 2)
    await world.drain()
    assert replies[-1].text == "Hello in private."
    # Exactly one model call: the DM's. The unlisted channel cost nothing.
    assert len(world.model.requests) == 1
    session = await bot.sessions.find(f"T0TEST:{dm['channel']}:{dm['ts']}")
    assert session is not None and session.is_dm and session.started_by == ALICE


async def test_channel_matched_by_name_glob(world: World):
    world.model.reply_text("dev answer")
    bot = await world.start_bot()
    mention = await world.mention(DEV_CHANNEL, ALICE, "hi")
    await world.wait_bot_replies(DEV_CHANNEL, mention["ts"], 2)
    await world.drain()
    session = await bot.sessions.find(f"T0TEST:{DEV_CHANNEL}:{mention['ts']}")
    assert session is not None and session.role == "viewer" and session.cluster == "prod"


async def test_same_event_delivered_twice_runs_one_turn_even_after_restart(world: World):
    world.model.reply_text("Only once.")
    bot = await world.start_bot()
    mention = world.slack.mention(SHOP_CHANNEL, ALICE, "once?")
    await world.slack.deliver_event(mention, event_id="Ev0DUP")
    await world.slack.deliver_event(mention, event_id="Ev0DUP", retry_attempt=1)
    await world.wait_bot_replies(SHOP_CHANNEL, mention["ts"], 2)
    await world.drain()
    await world.stop_bot(bot)
    await world.start_bot()
    await world.slack.deliver_event(mention, event_id="Ev0DUP", retry_attempt=2)
    await world.slack.wait_for(lambda s: len(s.acks) >= 3)
    await world.drain()
    assert len(world.model.requests) == 1
    answers = [m for m in world.slack.thread(SHOP_CHANNEL, mention["ts"]) if m.is_bot]
    assert len(answers) == 2  # one progress message, one answer


async def test_model_500_twice_then_success(world: World):
    world.model.reply_error(500)
    world.model.reply_error(500)
    world.model.reply_text("Recovered answer.")
    await world.start_bot()
    mention = await world.mention(SHOP_CHANNEL, ALICE, "status?")
    replies = await world.wait_bot_replies(SHOP_CHANNEL, mention["ts"], 2)
    await world.drain()
    assert replies[-1].text == "Recovered answer."
    assert len(world.model.requests) == 3


async def test_model_always_500_gives_one_clear_sentence_and_keeps_the_message(world: World):
    for _ in range(3):
        world.model.reply_error(500)
    bot = await world.start_bot()
    mention = await world.mention(SHOP_CHANNEL, ALICE, "status please")
    replies = await world.wait_bot_replies(SHOP_CHANNEL, mention["ts"], 2)
    await world.drain()
    assert replies[-1].text.startswith(":warning: ")
    assert "500" in replies[-1].text and "\n" not in replies[-1].text
    assert len(world.model.requests) == 3
    session = await bot.sessions.find(f"T0TEST:{SHOP_CHANNEL}:{mention['ts']}")
    assert session is not None
    stored = await bot.messages.all_for_session(session.id)
    assert stored[0].role is Role.USER and "status please" in (stored[0].content or "")
    assert stored[0].slack_user == ALICE


async def test_cluster_403_becomes_a_tool_error_and_the_bot_keeps_serving(world: World):
    world.kube.forbid("GET", r"/namespaces/shop/pods$")
    world.model.reply_tool_calls([("list_pods", {"namespace": "shop"})])
    world.model.reply_text("I am not allowed to list pods in shop.")
    world.model.reply_text("Second question answered.")
    await world.start_bot()
    first = await world.mention(SHOP_CHANNEL, ALICE, "pods?")
    replies = await world.wait_bot_replies(SHOP_CHANNEL, first["ts"], 2)
    await world.drain()
    tool_message = world.model.requests[1]["messages"][-1]
    assert tool_message["role"] == "tool" and "403" in tool_message["content"]
    assert "✗" in replies[0].text
    second = await world.mention(SHOP_CHANNEL, BOB, "anything else?")
    replies = await world.wait_bot_replies(SHOP_CHANNEL, second["ts"], 2)
    assert replies[-1].text == "Second question answered."


def run_cli(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bot.cli", *args],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "LITELLM_LOCAL_MODEL_COST_MAP": "True", **env},
        cwd=cwd,
        timeout=300,  # a safety net for a hung CLI, not a speed check (2 loaded cores)
        check=False,
    )


async def test_kelpie_check_against_the_test_servers(world: World, tmp_path: Path):
    import asyncio

    world.model.reply_default(TextStep("ok", 4, True, None, "stop"))
    config_path = tmp_path / "kelpie.yaml"
    config_path.write_text(yaml.safe_dump(world.config_data))
    repo = Path(__file__).resolve().parents[1]
    env = {**environ(world.slack), "PYTHONPATH": str(repo)}
    result = await asyncio.to_thread(
        run_cli, "check", "--config", str(config_path), env=env, cwd=tmp_path
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.strip().splitlines()
    assert all(line.startswith("ok") for line in lines), lines
    names = " ".join(lines)
    assert "auth.test" in names and "apps.connections.open" in names
    assert "/version" in names and "model default" in names and "database" in names

    bad = {**env, "SLACK_BOT_TOKEN": "xoxb-wrong"}
    result = await asyncio.to_thread(
        run_cli, "check", "--config", str(config_path), env=bad, cwd=tmp_path
    )
    assert result.returncode == 1
    fail = [line for line in result.stdout.splitlines() if line.startswith("FAIL")]
    assert len(fail) == 1 and "auth.test" in fail[0] and "SLACK_BOT_TOKEN" in fail[0]
    assert "xoxb-wrong" not in result.stdout + result.stderr
    assert MODEL_KEY not in result.stdout + result.stderr


def test_bad_config_exits_2_naming_the_key_path(tmp_path: Path):
    config = {
        "kubernetes": {"clusters": [{"name": "prod", "kubeconfig": "/nonexistent"}]},
        "models": {"profiles": {"default": {"model": "openai/x"}}},
        "roles": {"operator": {"tools": ["read/*", "present/*", "wirte/scale_deployment"]}},
        "slack": {"mode": "sockets"},
    }
    path = tmp_path / "bad.yaml"
    path.write_text(json.dumps(config))
    repo = Path(__file__).resolve().parents[1]
    for command in ("run", "check"):
        result = run_cli(
            command, "--config", str(path), env={"PYTHONPATH": str(repo)}, cwd=tmp_path
        )
        assert result.returncode == 2
        assert 'roles.operator.tools[2]: unknown kind "wirte" (present, read, diagnose, write)' in (
            result.stderr
        )
        assert "slack.mode" in result.stderr


def test_missing_secret_is_named(tmp_path: Path):
    config = {
        "kubernetes": {"clusters": [{"name": "prod", "kubeconfig": "/nonexistent"}]},
        "models": {"profiles": {"default": {"model": "openai/x"}}},
    }
    path = tmp_path / "ok.yaml"
    path.write_text(yaml.safe_dump(config))
    repo = Path(__file__).resolve().parents[1]
    result = run_cli("run", "--config", str(path), env={"PYTHONPATH": str(repo)}, cwd=tmp_path)
    assert result.returncode == 2
    assert "slack.bot_token_env: environment variable SLACK_BOT_TOKEN is not set" in result.stderr
    assert "slack.app_token_env: environment variable SLACK_APP_TOKEN is not set" in result.stderr


async def test_queue_mode_waits_for_the_running_turn(world: World):
    world.model.enqueue(HangStep(1.5, then=TextStep("First answer.")))
    world.model.reply_text("Second answer.")
    await world.start_bot({"slack": {"on_new_message": "queue"}})
    mention = await world.mention(SHOP_CHANNEL, ALICE, "first question")
    await world.model.wait_for_requests(1)
    follow_up = world.slack.message(SHOP_CHANNEL, BOB, "second question", thread_ts=mention["ts"])
    await world.slack.deliver_event(follow_up)
    await world.wait_bot_replies(SHOP_CHANNEL, mention["ts"], 4)
    await world.drain()
    texts = [m.text for m in world.slack.thread(SHOP_CHANNEL, mention["ts"]) if m.is_bot]
    assert "First answer." in texts and "Second answer." in texts
    # The second turn started only after the first finished: it carries the first answer.
    sent = [m["content"] for m in world.model.requests[1]["messages"]]
    assert "First answer." in sent and "second question" in sent[-1]


async def test_edits_joins_and_bot_messages_start_nothing(world: World):
    world.model.reply_text("Answer.")
    await world.start_bot()
    mention = await world.mention(SHOP_CHANNEL, ALICE, "question")
    await world.wait_bot_replies(SHOP_CHANNEL, mention["ts"], 2)
    await world.drain()
    thread = mention["ts"]
    for subtype in ("message_changed", "channel_join", "bot_message"):
        event = world.slack.message(
            SHOP_CHANNEL, BOB, f"{subtype} in thread", thread_ts=thread, subtype=subtype
        )
        await world.slack.deliver_event(event)
    own = world.slack.message(SHOP_CHANNEL, "U0KELPIE", "my own reply", thread_ts=thread)
    await world.slack.deliver_event(own)
    await world.slack.wait_for(lambda s: len(s.acks) >= 5)
    await world.drain()
    assert len(world.model.requests) == 1


async def test_health_and_readiness_endpoints(world: World):
    import aiohttp

    bot = await world.start_bot()
    base = f"http://127.0.0.1:{bot.health_port}"
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{base}/healthz") as response:
            assert response.status == 200
        async with http.get(f"{base}/readyz") as response:
            assert response.status == 200 and "ready" in await response.text()
        # Slack drops the socket and refuses new ones for a while: not ready until back.
        world.slack.fail("apps.connections.open")
        await world.slack.disconnect_all()
        status, text = 200, ""
        for _ in range(100):  # until the bot notices the drop (no fixed sleep)
            async with http.get(f"{base}/readyz") as response:
                status, text = response.status, await response.text()
            if status == 503:
                break
            await asyncio.sleep(0.05)
        assert status == 503 and "socket mode connection is down" in text
        world.slack.clear_faults("apps.connections.open")
        await world.slack.wait_connected(timeout=15)
