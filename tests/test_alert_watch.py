"""Alerts already in Slack (issue 29 item 5, `alerts.watch`): an alerting app posts in a
channel kelpie watches; the fake Slack delivers its message as the Events API does (a
`message` event with `bot_id`/`app_id`, subtype `bot_message` from an incoming webhook),
and kelpie investigates in that message's thread under the channel's role, once."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from bot.app import Kelpie
from bot.checks import alert_checks
from bot.config import ConfigError, Secrets, parse_config
from tests.bot_processes import Launcher
from tests.peers.model_server import TextStep
from tests.peers.slack_server import Message, SlackServer
from tests.test_alerts import offered_tools
from tests.world import ALICE, SHOP_CHANNEL, World, environ, merge

AM_BOT, AM_APP = "B0AMBOT", "A0AMAPP"  # Alertmanager's incoming webhook
GRAFANA_APP = "A0GRAFANA"  # Grafana's Slack app, posting as its bot user
OTHER_BOT, OTHER_APP = "B0DEPLOYS", "A0DEPLOYS"  # a bot nobody configured
MARK = "[alert from B0AMBOT, not a person]"


def watching(limit: int = 10, **more: Any) -> dict[str, Any]:
    """#shop-oncall is watched for Alertmanager's firing messages and Grafana's, under a role
    that may list pods only."""
    return {
        "roles": {"pods-only": {"tools": ["read/list_pods"], "namespaces": ["shop"]}},
        "channels": [{"match": {"id": SHOP_CHANNEL}, "role": "pods-only", "namespace": "shop"}],
        "alerts": {
            "watch": [
                {
                    "channel": SHOP_CHANNEL,
                    "bot_ids": [AM_BOT],
                    "app_ids": [GRAFANA_APP],
                    "text_re": r".*\[FIRING.*",
                    "instruction": "check the last rollout first",
                }
            ],
            "max_investigations_per_hour": limit,
            **more,
        },
    }


def am_message(world: World, title: str, text: str = "<!channel> checkout-0 restarts") -> Any:
    """Alertmanager's Slack notification: an incoming webhook's attachment."""
    attachment = {"fallback": title, "title": title, "text": text, "color": "danger"}
    return world.slack.bot_message(
        SHOP_CHANNEL, "", bot_id=AM_BOT, app_id=AM_APP, attachments=[attachment]
    )


def kelpies(world: World, ts: str) -> list[Message]:
    return [m for m in world.slack.thread(SHOP_CHANNEL, ts) if m.is_bot and m.ts != ts]


async def said(world: World, ts: str, *wants: str, timeout: float = 30) -> Message:
    def found(server: Any) -> Message | None:
        lines = [m for m in kelpies(world, ts) if any(want in m.text for want in wants)]
        return lines[0] if lines else None

    message: Message = await world.slack.wait_for(found, timeout=timeout)
    return message


def metric(bot: Kelpie, event: str) -> float:
    value = bot.metrics.registry.get_sample_value(
        "kelpie_alert_notifications_total", {"receiver": "slack", "event": event}
    )
    return value or 0.0


async def test_an_alerting_apps_message_is_investigated_once_in_its_thread(world: World):
    bot = await world.start_bot(watching())
    world.model.reply_text("checkout-0 restarts after OOM kills.")
    event = am_message(world, "[FIRING:1] KubePodCrashLooping shop/checkout-0")
    event_id = "EvWATCH0001"
    await world.slack.deliver_event(event, event_id=event_id)
    await said(world, event["ts"], "OOM kills")
    [request] = world.model.requests
    assert offered_tools(request) <= {"list_pods"}  # the channel's role, as for a person
    asked = "\n".join(str(m.get("content")) for m in request["messages"] if m["role"] == "user")
    assert MARK in asked and "KubePodCrashLooping shop/checkout-0" in asked
    assert "check the last rollout first" in asked
    assert "<!channel>" not in asked  # the app's text is data inside <alert>, escaped
    # Slack's retry, and the same message in another delivery: no second investigation.
    await world.slack.deliver_event(event, event_id=event_id, retry_attempt=1)
    await world.slack.deliver_event(event)
    await world.slack.wait_for(lambda s: metric(bot, "deduplicated") == 1)
    await world.drain()
    assert len(world.model.requests) == 1 and len(kelpies(world, event["ts"])) >= 1
    assert [metric(bot, e) for e in ("received", "routed", "investigated")] == [2, 1, 1]


async def test_other_messages_in_a_watched_channel_are_left_alone(world: World):
    bot = await world.start_bot(watching())
    world.model.reply_default(TextStep("Investigated."))
    resolved = am_message(world, "[RESOLVED] KubePodCrashLooping shop/checkout-0")
    other = world.slack.bot_message(
        SHOP_CHANNEL, "[FIRING] deploy of checkout", bot_id=OTHER_BOT, app_id=OTHER_APP
    )
    person = world.slack.message(SHOP_CHANNEL, ALICE, "[FIRING] is anyone on it?")
    # Grafana's app posts as its bot user (no subtype): matched by its app id.
    grafana = world.slack.bot_message(
        SHOP_CHANNEL,
        "[FIRING:1] HighLatency checkout",
        bot_id="B0GRAFANA",
        app_id=GRAFANA_APP,
        webhook=False,
        username="Grafana",
    )
    for event in (resolved, other, person, grafana):
        await world.slack.deliver_event(event)
    await said(world, grafana["ts"], "Investigated.")
    await world.drain()
    for event in (resolved, other, person):
        assert kelpies(world, event["ts"]) == []
    assert len(world.model.requests) == 1
    assert metric(bot, "dropped") == 1 and metric(bot, "investigated") == 1


async def test_watched_messages_count_against_the_channels_hour(world: World):
    await world.start_bot(watching(limit=1))
    world.model.reply_default(TextStep("Investigated."))
    first = am_message(world, "[FIRING:1] DiskFull shop/db-0")
    second = am_message(world, "[FIRING:1] DiskFull shop/db-1")
    await world.slack.deliver_event(first)
    await said(world, first["ts"], "Investigated.")
    await world.slack.deliver_event(second)
    limited = await said(world, second["ts"], "No investigation ran")
    assert "alerts.max_investigations_per_hour" in limited.text
    assert len(world.model.requests) == 1


async def test_two_replicas_given_the_same_message_investigate_it_once(any_db_world: World):
    world = any_db_world  # SQLite and PostgreSQL
    for _ in range(2):
        await world.start_bot(watching())
    await world.slack.wait_connected(count=2)
    world.model.reply_default(TextStep("Investigated once."))
    event = am_message(world, "[FIRING:1] Twice shop/checkout-0")
    # Slack's retry reaches the other replica; the same message also comes in another
    # delivery there.
    await world.slack.deliver_event(event, event_id="EvTWICE01", connection=0)
    await world.slack.deliver_event(event, event_id="EvTWICE01", retry_attempt=1, connection=1)
    await world.slack.deliver_event(event, event_id="EvTWICE02", connection=1)
    await said(world, event["ts"], "Investigated once.")
    await world.drain()
    assert len(world.model.requests) == 1


async def test_killed_before_its_investigation_a_watched_message_is_taken_over(
    world: World, launch: Launcher
):
    start = launch({**watching(), "database": {"lease_s": 3}})
    bot = await start()
    world.model.reply_text("Investigated after the restart.")
    # Stored in the inbox and acknowledged; killed while it looks up the channel's name.
    held = world.slack.hold("conversations.info")
    event = am_message(world, "[FIRING:1] Killed shop/checkout-0", text="checkout-0 OOM")
    await world.slack.deliver_event(event)
    await world.slack.wait_for(lambda s: s.calls_to("conversations.info"), timeout=30)
    bot.kill()
    held.set()
    world.slack.clear_faults()
    await start()
    await said(world, event["ts"], "Investigated after the restart.", timeout=120)
    [request] = world.model.requests
    assert "Killed shop/checkout-0" in json.dumps(request)  # the text kept at rest


def test_kelpie_check_shows_the_watched_channels(world: World):
    config = parse_config(merge(world.config_data, watching()))
    lines = [r.line() for r in alert_checks(config, Secrets(config, environ(world.slack)))]
    assert lines == [
        f"ok   alert watch 1: {SHOP_CHANNEL} (role pods-only): messages of bots B0AMBOT, "
        "apps A0GRAFANA matching .*\\[FIRING.* are investigated in their thread (kelpie must be "
        "a member of the channel; the app subscribed to message.channels or message.groups)"
    ]


@pytest.mark.parametrize(
    ("watch", "said_"),
    [
        ({"channel": SHOP_CHANNEL}, "bot_ids or app_ids"),
        ({"channel": SHOP_CHANNEL, "bot_ids": [AM_BOT], "text_re": "(["}, "regular expr"),
        ({"channel": "#alerts", "bot_ids": [AM_BOT]}, "channel"),
        ({"channel": SHOP_CHANNEL, "bot_ids": ["U0PERSON"]}, "bot_ids"),
    ],
)
def test_watch_config_mistakes_are_refused_with_a_sentence(
    world: World, watch: dict[str, Any], said_: str
):
    with pytest.raises(ConfigError, match=said_):
        parse_config(merge(world.config_data, {"alerts": {"watch": [watch]}}))


def test_the_readme_and_example_config_show_a_watched_channel(world: World):
    root = Path(__file__).resolve().parents[1]
    readme = (root / "README.md").read_text()
    section = readme[readme.index("### Alerts already in Slack") :]
    snippet = section.split("```yaml\n")[1].split("```")[0]
    assert parse_config(merge(world.config_data, yaml.safe_load(snippet))).alerts.watch
    example = (root / "config" / "kelpie.example.yaml").read_text()
    [first, *rest] = example[example.index("#   watch:") :].splitlines()
    entry = itertools.takewhile(lambda line: line.startswith("#     "), rest)
    block = "\n".join(line[4:] for line in [first, *entry])
    watch = yaml.safe_load(block)["watch"]
    assert parse_config(merge(world.config_data, {"alerts": {"watch": watch}})).alerts.watch


async def test_metrics_page_counts_watched_messages(world: World):
    bot = await world.start_bot(watching())
    await world.slack.deliver_event(am_message(world, "[RESOLVED] Quiet shop/checkout-0"))
    await world.slack.wait_for(lambda s: metric(bot, "dropped") == 1)
    async with aiohttp.ClientSession() as session:
        url = f"http://127.0.0.1:{bot.health_port}/metrics"
        async with session.get(url) as answer:
            page = await answer.text()
    assert 'kelpie_alert_notifications_total{event="dropped",receiver="slack"} 1.0' in page


async def test_kelpies_own_messages_are_never_an_alert_to_it(world: World):
    # Configured by mistake with kelpie's own bot id: Slack sends kelpie its own messages
    # (message.channels), and they must not start investigations of themselves.
    override = watching()
    override["alerts"]["watch"][0]["bot_ids"] = [AM_BOT, SlackServer.bot_id]
    override["alerts"]["watch"][0].pop("text_re")
    bot = await world.start_bot(override)
    world.model.reply_default(TextStep("Investigated."))
    own = world.slack.bot_message(
        SHOP_CHANNEL,
        "[FIRING:1] an answer of kelpie's",
        bot_id=SlackServer.bot_id,
        app_id=SlackServer.app_id,
        webhook=False,
    )
    await world.slack.deliver_event(own)
    await world.slack.deliver_event(am_message(world, "[FIRING:1] Real shop/checkout-0"))
    await world.slack.wait_for(lambda s: metric(bot, "received") == 1)
    await world.drain()
    assert kelpies(world, own["ts"]) == [] and metric(bot, "received") == 1
