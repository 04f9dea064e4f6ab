"""What an operator sees from outside: /metrics after real turns through the peers, the
probes, and JSON log lines that carry the session, turn and event ids."""

from __future__ import annotations

import json
import logging

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from bot.config import LogFormat, LoggingConfig, parse_config
from bot.logs import configure
from tests.test_approvals import click, propose_scale, wait_said
from tests.world import ALICE, DAVE, SHOP_CHANNEL, World


async def scrape(port: int | None, path: str = "/metrics") -> tuple[int, str]:
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{port}{path}") as response:
            return response.status, await response.text()


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


async def test_metrics_after_a_turn_with_a_tool_call_a_429_and_a_slack_error(world: World):
    world.model.reply_tool_calls([("list_pods", {"namespace": "shop"})], usage=(120, 30))
    world.model.reply_text("checkout-api is crashlooping.", usage=(200, 12))
    bot = await world.start_bot()
    world.slack.rate_limit("chat.postMessage", retry_after=1)
    world.slack.fail("reactions.remove", "no_reaction", times=1)

    mention = await world.mention(SHOP_CHANNEL, ALICE, "why is checkout-api crashlooping?")
    await world.wait_bot_replies(SHOP_CHANNEL, mention["ts"], 2)
    await world.drain()
    status, text = await scrape(bot.health_port)

    assert status == 200
    found = samples(text)
    assert found[("kelpie_turns_total", (("finish", "stop"),))] == 1
    assert found[("kelpie_rounds_total", ())] == 2
    assert found[("kelpie_tool_calls_total", (("outcome", "ok"), ("tool", "list_pods")))] == 1
    model = (("direction", "input"), ("model", "openai/test-model"))
    assert found[("kelpie_model_tokens_total", model)] == 320
    out = (("direction", "output"), ("model", "openai/test-model"))
    assert found[("kelpie_model_tokens_total", out)] == 42
    latency = (("model", "openai/test-model"), ("outcome", "ok"))
    assert found[("kelpie_model_request_seconds_count", latency)] == 2
    assert found[("kelpie_slack_rate_limited_total", (("method", "chat.postMessage"),))] == 1
    error = (("error", "no_reaction"), ("method", "reactions.remove"))
    assert found[("kelpie_slack_api_errors_total", error)] == 1


async def test_metrics_count_approval_decisions(world: World):
    bot = await world.start_bot()
    mention, card = await propose_scale(world, then="OK, not scaling.")
    await click(world, DAVE, card, "kelpie_reject")
    await wait_said(world, mention["ts"], "OK, not scaling.")
    await world.drain()

    _, text = await scrape(bot.health_port)

    found = samples(text)
    assert found[("kelpie_approvals_total", (("decision", "rejected"),))] == 1
    assert ("kelpie_approvals_total", (("decision", "approved"),)) not in found
    # The call itself ended its turn waiting; the decision came later, as an approval.
    pending = (("outcome", "pending"), ("tool", "scale_deployment"))
    assert found[("kelpie_tool_calls_total", pending)] == 1


async def test_probes_and_the_metrics_page(world: World):
    bot = await world.start_bot()
    assert await scrape(bot.health_port, "/healthz") == (200, "ok\n")
    assert await scrape(bot.health_port, "/readyz") == (200, "ready\n")
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{bot.health_port}/metrics") as response:
            assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            assert "# TYPE kelpie_turns_total counter" in await response.text()


async def test_json_log_lines_carry_the_session_turn_and_event_ids(world: World, capsys):
    configure(LoggingConfig(format=LogFormat.JSON, level="INFO"))
    try:
        world.model.reply_text("All good.")
        await world.start_bot()
        mention = await world.mention(SHOP_CHANNEL, ALICE, "is shop healthy?")
        await world.wait_bot_replies(SHOP_CHANNEL, mention["ts"], 2)
        await world.drain()
    finally:
        logging.getLogger().handlers.clear()
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line]
    session = await world.bots[0].sessions.find(f"T0TEST:{SHOP_CHANNEL}:{mention['ts']}")
    assert session is not None
    turn_lines = [line for line in lines if line.get("session_id") == str(session.id)]
    assert turn_lines, lines
    assert all(line["turn_id"] and line["event_id"] for line in turn_lines)
    assert {"time", "level", "logger", "message"} <= set(turn_lines[0])


async def test_tool_names_the_model_invents_share_one_label(world: World):
    invented = [(f"rm_rf_{i}", {}) for i in range(3)]
    world.model.reply_tool_calls([("list_pods", {"namespace": "shop"}), *invented])
    world.model.reply_text("Done.")
    bot = await world.start_bot()

    mention = await world.mention(SHOP_CHANNEL, ALICE, "is shop healthy?")
    await world.wait_bot_replies(SHOP_CHANNEL, mention["ts"], 2)
    await world.drain()
    _, text = await scrape(bot.health_port)

    found = samples(text)
    tools = {dict(labels)["tool"] for name, labels in found if name == "kelpie_tool_calls_total"}
    assert tools == {"list_pods", "unknown"}
    assert "rm_rf" not in text
    calls = {labels: n for (name, labels), n in found.items() if name == "kelpie_tool_calls_total"}
    assert sum(n for labels, n in calls.items() if ("tool", "unknown") in labels) == 3


def test_the_health_listener_is_loopback_unless_configured() -> None:
    base = {
        "kubernetes": {"clusters": [{"name": "prod", "kubeconfig": "/nonexistent"}]},
        "models": {"profiles": {"default": {"model": "openai/test-model"}}},
    }
    assert parse_config(base).server.health.host == "127.0.0.1"
    exposed = {**base, "server": {"health": {"host": "0.0.0.0"}}}
    assert parse_config(exposed).server.health.host == "0.0.0.0"
