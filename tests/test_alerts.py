"""Alerts open their own investigation (issue 29): a real Alertmanager posts its webhooks
to kelpie's receiver; the fake Slack shows the threads and the scripted model the turns.

Alertmanager groups by `alertname` within 100 ms and sends a change within a second; each
test fires alerts of its own names, so one Alertmanager serves the module."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from bot.app import Kelpie
from bot.checks import alert_checks
from bot.config import ConfigError, Secrets, parse_config
from tests.bot_processes import Launcher
from tests.peers.alertmanager import AlertmanagerServer
from tests.peers.model_server import DynamicStep, TextStep
from tests.peers.slack_server import Message
from tests.postgres import free_port
from tests.test_approvals import card_text, click, wait_card
from tests.test_streaming import click_stop
from tests.world import (
    ALERTS_TOKEN,
    ALICE,
    CAROL,
    DEV_CHANNEL,
    OPS_CHANNEL,
    SHOP_CHANNEL,
    World,
    environ,
    merge,
)

PORT = free_port()
QUESTION_MARK = "[alert from alertmanager, not a person]"


@pytest.fixture(scope="module")
def alertmanager() -> Iterator[AlertmanagerServer]:
    server = AlertmanagerServer(
        f"http://127.0.0.1:{PORT}/alerts/alertmanager",
        webhook_token=ALERTS_TOKEN,
        group_by=("alertname",),
    )
    server.start()
    yield server
    server.stop()


def alerting(port: int = PORT, limit: int = 10) -> dict[str, Any]:
    """SHOP_CHANNEL gets shop's alerts under a role that may list pods only; people ask in
    #dev-payments."""
    return {
        "server": {"alerts": {"host": "127.0.0.1", "port": port}},
        "roles": {"pods-only": {"tools": ["read/list_pods"], "namespaces": ["shop"]}},
        "channels": [
            {"match": {"id": SHOP_CHANNEL}, "role": "pods-only", "namespace": "shop"},
            {"match": {"name": "dev-*"}, "role": "viewer"},
        ],
        "alerts": {
            "receivers": [
                {
                    "type": "alertmanager",
                    "auth": {"method": "bearer", "token_env": "KELPIE_TEST_ALERTS_TOKEN"},
                },
                {
                    "type": "grafana",
                    "auth": {
                        "method": "basic",
                        "username_env": "KELPIE_TEST_ALERTS_USER",
                        "password_env": "KELPIE_TEST_ALERTS_PASSWORD",
                    },
                },
            ],
            "routes": [
                {"match": {"team": "nobody"}, "channel": "C0NOWHERE"},
                {
                    "match_re": {"namespace": "shop|payments"},
                    "channel": SHOP_CHANNEL,
                    "instruction": "check the last rollout first",
                },
            ],
            "max_investigations_per_hour": limit,
        },
    }


def fired(name: str, pod: str, *, ended: bool = False, **labels: str) -> dict[str, Any]:
    """An alert as Prometheus posts it (ended: its endsAt in the past, i.e. resolved)."""
    alert: dict[str, Any] = {
        "labels": {"alertname": name, "namespace": "shop", "pod": pod, **labels},
        "annotations": {"summary": f"<!channel> {pod} restarts"},
        "startsAt": STARTED.isoformat(),
        "generatorURL": "http://prometheus.example/graph?g0.expr=up",
    }
    if ended:
        alert["endsAt"] = (datetime.now(UTC) - timedelta(seconds=1)).isoformat()
    return alert


STARTED = datetime.now(UTC) - timedelta(minutes=5)


def payload(group: str, alerts: list[dict[str, Any]], status: str = "firing") -> dict[str, Any]:
    """Alertmanager's webhook payload (version 4), as a test sends it directly."""
    return {
        "version": "4",
        "groupKey": group,
        "status": status,
        "receiver": "kelpie",
        "groupLabels": {},
        "commonLabels": {},
        "commonAnnotations": {},
        "externalURL": "http://am.example",
        "alerts": [
            {
                "status": status,
                "labels": a["labels"],
                "annotations": a["annotations"],
                "startsAt": a["startsAt"],
                "endsAt": "0001-01-01T00:00:00Z",
                "generatorURL": a["generatorURL"],
                "fingerprint": f"{abs(hash(json.dumps(a['labels'], sort_keys=True))):016x}",
            }
            for a in alerts
        ],
    }


async def post(
    port: int, body: bytes | dict[str, Any], token: str | None = ALERTS_TOKEN
) -> tuple[int, str]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    async with aiohttp.ClientSession() as session:
        url = f"http://127.0.0.1:{port}/alerts/alertmanager"
        async with session.post(url, data=data, headers=headers) as answer:
            return answer.status, await answer.text()


def headers_of(world: World, name: str) -> list[Message]:
    return [m for m in world.slack.channel_messages(SHOP_CHANNEL) if name in m.text]


async def header(world: World, name: str, want: str, timeout: float = 30) -> Message:
    def found(server: Any) -> Message | None:
        shown = headers_of(world, name)
        return shown[0] if shown and want in shown[0].text else None

    message: Message = await world.slack.wait_for(found, timeout=timeout)
    return message


async def thread_line(world: World, ts: str, *wants: str, timeout: float = 30) -> Message:
    """The first line of the thread at `ts` holding one of `wants`, once there is one."""

    def found(server: Any) -> Message | None:
        lines = [
            m
            for m in server.thread(SHOP_CHANNEL, ts)
            if m.ts != ts and any(want in m.text for want in wants)
        ]
        return lines[0] if lines else None

    message: Message = await world.slack.wait_for(found, timeout=timeout)
    return message


def offered_tools(request: dict[str, Any]) -> set[str]:
    return {tool["function"]["name"] for tool in request.get("tools") or []}


def metric(bot: Kelpie, event: str) -> float:
    value = bot.metrics.registry.get_sample_value(
        "kelpie_alert_notifications_total", {"receiver": "alertmanager", "event": event}
    )
    return value or 0.0


async def test_an_alert_opens_one_thread_investigated_with_the_channels_tools_then_resolves(
    world: World, alertmanager: AlertmanagerServer
):
    bot = await world.start_bot(alerting())
    world.model.reply_text("checkout-0 restarts after OOM kills.")
    alertmanager.post_alerts([fired("ShopCrashLooping", "checkout-0")])

    first = await header(world, "ShopCrashLooping", "Firing")
    # The header: every untrusted part escaped (the summary's <!channel> pings nobody).
    assert "severity" in first.text and "&lt;!channel&gt;" in first.text
    assert "<!channel>" not in first.text and "prometheus.example" in first.text
    answer = await thread_line(world, first.ts, "OOM kills")
    assert answer.is_bot
    [request] = world.model.requests
    assert offered_tools(request) <= {"list_pods"}
    asked = "\n".join(str(m.get("content")) for m in request["messages"] if m["role"] == "user")
    assert QUESTION_MARK in asked and "check the last rollout first" in asked
    assert "ShopCrashLooping" in asked

    # A second alert of the group: the same thread, its header counts two, one line says so.
    alertmanager.post_alerts([fired("ShopCrashLooping", "checkout-1")])
    await header(world, "ShopCrashLooping", "(2 alert(s))")
    await thread_line(world, first.ts, "Now 2 firing")
    # Both resolved: the header says so, with the duration.
    alertmanager.post_alerts(
        [fired("ShopCrashLooping", pod, ended=True) for pod in ("checkout-0", "checkout-1")]
    )
    await header(world, "ShopCrashLooping", "Resolved")
    await thread_line(world, first.ts, "Resolved after")
    assert len(headers_of(world, "ShopCrashLooping")) == 1
    assert len(world.model.requests) == 1  # one investigation, no more turns
    assert metric(bot, "investigated") == 1 and metric(bot, "routed") >= 3


async def test_wrong_or_missing_credentials_are_401_and_nothing_is_posted(
    world: World, caplog: pytest.LogCaptureFixture
):
    port = free_port()
    await world.start_bot(alerting(port))
    notification = payload('{}:{alertname="Refused"}', [fired("Refused", "checkout-0")])
    with caplog.at_level(logging.WARNING, logger="bot.alerts.receiver"):
        assert (await post(port, notification, token="wrong"))[0] == 401
        assert (await post(port, notification, token=None))[0] == 401
    assert sum("refused a request" in r.getMessage() for r in caplog.records) == 2
    assert (await post(port, b"{not json"))[0] == 400
    assert (await post(port, {**notification, "version": "3"}))[0] == 400
    assert (await post(port, b"x" * 3_000_000))[0] == 413
    assert world.slack.calls_to("chat.postMessage") == []


async def test_a_redelivered_notification_is_answered_200_and_posts_nothing_new(world: World):
    port = free_port()
    bot = await world.start_bot(alerting(port))
    world.model.reply_text("Looked.")
    notification = payload('{}:{alertname="Twice"}', [fired("Twice", "checkout-0")])
    assert (await post(port, notification))[0] == 200
    first = await header(world, "Twice", "Firing")
    await thread_line(world, first.ts, "Looked.")
    posted = len(world.slack.calls_to("chat.postMessage"))
    assert (await post(port, notification))[0] == 200
    await bot.alerts.drain() if bot.alerts else None
    assert len(world.slack.calls_to("chat.postMessage")) == posted
    assert metric(bot, "deduplicated") == 1


async def test_an_alert_matching_no_route_is_counted_and_never_posted(world: World):
    port = free_port()
    bot = await world.start_bot(alerting(port))
    alert = fired("Elsewhere", "x-0")
    alert["labels"]["namespace"] = "kube-system"
    assert (await post(port, payload('{}:{alertname="Elsewhere"}', [alert])))[0] == 200
    assert bot.alerts is not None
    await bot.alerts.drain()
    assert metric(bot, "dropped") == 1
    assert world.slack.calls_to("chat.postMessage") == []
    async with aiohttp.ClientSession() as session:
        url = f"http://127.0.0.1:{bot.health_port}/metrics"
        async with session.get(url) as answer:
            page = await answer.text()
    for event in ("received", "dropped"):
        shown = f'kelpie_alert_notifications_total{{event="{event}",receiver="alertmanager"}} 1.0'
        assert shown in page


async def test_a_storm_of_200_alerts_gets_every_group_a_thread_and_at_most_the_limit_investigated(
    world: World, alertmanager: AlertmanagerServer
):
    bot = await world.start_bot(alerting(limit=3))
    world.model.reply_default(DynamicStep(answer_alert_or_person))
    names = [f"Storm{group:02d}" for group in range(20)]
    alertmanager.post_alerts([fired(name, f"pod-{index}") for name in names for index in range(10)])
    # A person asks meanwhile, and is answered.
    mention = await world.mention(DEV_CHANNEL, ALICE, "is payments fine?")

    def threads(server: Any) -> list[Message] | None:
        shown = [m for m in server.channel_messages(SHOP_CHANNEL) if "Storm" in m.text]
        return shown if len(shown) >= 20 else None

    shown = await world.slack.wait_for(threads, timeout=120)
    assert sorted(m.text.split("`")[1] for m in shown) == names  # every group, once
    lines = []
    for message in shown:
        said = await thread_line(world, message.ts, "Investigated.", "No investigation", timeout=60)
        lines.append(said.text)
    limited = [line for line in lines if line.startswith("No investigation ran:")]
    assert len(limited) == 17 and "alerts.max_investigations_per_hour" in limited[0]
    assert lines.count("Investigated.") == 3
    await world.slack.wait_for(
        lambda s: any("A person's answer." in m.text for m in s.thread(DEV_CHANNEL, mention["ts"]))
    )
    assert len(world.model.requests) == 4
    assert metric(bot, "investigated") == 3 and metric(bot, "limited") == 17


def answer_alert_or_person(request: dict[str, Any]) -> TextStep:
    asked = json.dumps(request["messages"])
    return TextStep("Investigated." if QUESTION_MARK in asked else "A person's answer.")


async def test_the_investigations_per_hour_come_back_after_an_hour(world: World):
    port = free_port()
    now = [datetime.now(UTC)]
    await world.start_bot(alerting(port, limit=1), alert_clock=lambda: now[0])
    world.model.reply_text("First.")
    for name in ("HourA", "HourB"):
        await post(port, payload(f'{{}}:{{alertname="{name}"}}', [fired(name, "p-0")]))
    a = await header(world, "HourA", "Firing")
    b = await header(world, "HourB", "Firing")
    said = [await thread_line(world, ts, "First.", "No investigation") for ts in (a.ts, b.ts)]
    assert sorted(m.text.split(":")[0] for m in said) == ["First.", "No investigation ran"]
    # A person asks in the thread that had no investigation, and is answered there.
    [limited] = [(m, x) for m, x in zip(said, (a, b), strict=True) if "No investigation" in m.text]
    assert "Mention me in this thread" in limited[0].text
    world.model.reply_text("Asked by a person.")
    await world.mention(SHOP_CHANNEL, ALICE, "<@UKELPIE> why?", thread_ts=limited[1].ts)
    await thread_line(world, limited[1].ts, "Asked by a person.")
    now[0] += timedelta(hours=1, seconds=1)
    await post(port, payload('{}:{alertname="HourC"}', [fired("HourC", "p-0")]))
    world.model.reply_text("Third.")
    c = await header(world, "HourC", "Firing")
    await thread_line(world, c.ts, "Third.")


async def test_two_replicas_receiving_the_same_notification_make_one_thread(any_db_world: World):
    world = any_db_world  # SQLite and PostgreSQL
    ports = free_port(), free_port()
    for port in ports:
        await world.start_bot(alerting(port))
    world.model.reply_text("One investigation.")
    notification = payload('{}:{alertname="Both"}', [fired("Both", "checkout-0")])
    answers = await asyncio.gather(*(post(port, notification) for port in ports))
    assert [status for status, _ in answers] == [200, 200]
    first = await header(world, "Both", "Firing")
    await thread_line(world, first.ts, "One investigation.")
    for bot in world.bots:
        if bot.alerts is not None:
            await bot.alerts.drain()
    assert len(headers_of(world, "Both")) == 1 and len(world.model.requests) == 1


async def test_two_replicas_receiving_a_groups_notifications_keep_one_thread(any_db_world: World):
    world = any_db_world  # SQLite and PostgreSQL
    ports = free_port(), free_port()
    for port in ports:
        await world.start_bot(alerting(port))
    world.model.reply_text("Looked once.")
    group = '{}:{alertname="Split"}'
    await post(ports[0], payload(group, [fired("Split", "a-0")]))
    first = await header(world, "Split", "Firing")
    await post(ports[1], payload(group, [fired("Split", "a-0"), fired("Split", "a-1")]))
    await header(world, "Split", "(2 alert(s))")
    await thread_line(world, first.ts, "Now 2 firing")
    assert len(headers_of(world, "Split")) == 1


async def test_killed_between_receipt_and_thread_the_notification_is_taken_over(
    world: World, launch: Launcher
):
    port = free_port()
    start = launch({**alerting(port), "database": {"lease_s": 3}})
    bot = await start()
    await _listening(port)
    world.model.reply_text("Investigated after the restart.")
    world.slack.delay("chat.postMessage", 60)  # stored and answered 200; the header hangs
    notification = payload('{}:{alertname="Killed"}', [fired("Killed", "checkout-0")])
    assert (await post(port, notification))[0] == 200
    # The group is claimed in the store and its header on its way: killed before Slack answers.
    await world.slack.wait_for_call(
        "chat.postMessage", lambda call: "Killed" in str(call.params.get("text")), timeout=30
    )
    bot.kill()
    world.slack.clear_faults()
    await start()
    first = await header(world, "Killed", "Firing", timeout=120)
    await thread_line(world, first.ts, "Investigated after the restart.", timeout=120)
    assert len(headers_of(world, "Killed")) == 1


async def _listening(port: int) -> None:
    for _ in range(600):
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.1)  # a fresh process importing its libraries
            continue
        writer.close()
        await writer.wait_closed()
        return
    raise AssertionError("the alerts listener never opened")


async def test_a_flapping_group_reuses_its_thread_within_reopen_s_and_opens_a_new_one_after(
    world: World,
):
    port = free_port()
    now = [datetime.now(UTC)]
    bot = await world.start_bot(
        merge(alerting(port), {"alerts": {"reopen_s": 600}}), alert_clock=lambda: now[0]
    )
    world.model.reply_default(TextStep("Investigated."))
    group = '{}:{alertname="Flap"}'
    alert = fired("Flap", "checkout-0")
    await post(port, payload(group, [alert]))
    first = await header(world, "Flap", "Firing")
    await post(port, payload(group, [alert], status="resolved"))
    await header(world, "Flap", "Resolved")
    now[0] += timedelta(seconds=60)
    again = {**alert, "startsAt": now[0].isoformat()}
    await post(port, payload(group, [again]))
    await thread_line(world, first.ts, "Firing again.")
    assert len(headers_of(world, "Flap")) == 1
    await post(port, payload(group, [again], status="resolved"))

    def resolved_twice(server: Any) -> bool:
        lines = server.thread(SHOP_CHANNEL, first.ts)
        return sum(m.text.startswith("Resolved after") for m in lines) == 2

    await world.slack.wait_for(resolved_twice)  # handled before the clock moves on
    now[0] += timedelta(seconds=601)
    later = {**alert, "startsAt": now[0].isoformat()}
    await post(port, payload(group, [later]))
    await world.slack.wait_for(lambda s: len(headers_of(world, "Flap")) == 2)
    assert bot.alerts is not None
    await bot.alerts.drain()


async def test_grafana_posts_with_basic_auth_and_gets_its_thread(world: World):
    port = free_port()
    await world.start_bot(alerting(port))
    world.model.reply_default(TextStep("Investigated."))
    notification = {**payload('{}/{}:{alertname="FromGrafana"}', [fired("FromGrafana", "g-0")])}
    notification["version"] = "1"
    user, password = environ(world.slack)["KELPIE_TEST_ALERTS_USER"], ALERTS_TOKEN[::-1]
    url = f"http://127.0.0.1:{port}/alerts/grafana"
    async with aiohttp.ClientSession() as session:
        wrong = aiohttp.BasicAuth(user, "wrong")
        async with session.post(url, json=notification, auth=wrong) as answer:
            assert answer.status == 401
        right = aiohttp.BasicAuth(user, password)
        async with session.post(url, json=notification, auth=right) as answer:
            assert answer.status == 200
    first = await header(world, "FromGrafana", "Firing")
    await thread_line(world, first.ts, "Investigated.")


def test_kelpie_check_shows_the_receivers_and_routes(world: World):
    config = parse_config(merge(world.config_data, alerting()))
    lines = [r.line() for r in alert_checks(config, Secrets(config, environ(world.slack)))]
    assert lines == [
        f"ok   alert receiver alertmanager: POST 127.0.0.1:{PORT}/alerts/alertmanager, "
        "bearer auth set",
        f"ok   alert receiver grafana: POST 127.0.0.1:{PORT}/alerts/grafana, basic auth set",
        "ok   alert route 1: team=nobody -> C0NOWHERE: no role by its id (by name, resolved later)",
        f"ok   alert route 2: namespace=~shop|payments -> {SHOP_CHANNEL} (role pods-only, "
        "investigated)",
    ]
    unset = [r.line() for r in alert_checks(config, Secrets(config, {}))]
    assert unset[0] == (
        "FAIL alert receiver alertmanager: alerts.receivers[0].auth.token_env: "
        "environment variable KELPIE_TEST_ALERTS_TOKEN is not set"
    )


def test_the_readme_and_example_config_show_alerts_config_that_parses(world: World, tmp_path: Path):
    root = Path(__file__).resolve().parents[1]
    readme = (root / "README.md").read_text()
    section = readme[readme.index("## Alerts open their own investigation") :]
    snippet = section.split("```yaml\n")[1].split("```")[0]
    parse_config(merge(world.config_data, yaml.safe_load(snippet)))
    example = (root / "config" / "kelpie.example.yaml").read_text()
    # The commented block, up to the blank line before the next section.
    commented = example[example.index("# alerts:\n#   receivers") :].split("\n\n")[0].splitlines()
    block = "\n".join(line[2:] for line in commented if line.startswith("#"))
    parse_config(
        merge(world.config_data, {**yaml.safe_load(block), "server": alerting()["server"]})
    )
    # Alertmanager's own checker reads the receiver snippet (with a route to it).
    receiver = yaml.safe_load(section.split("```yaml\n")[2].split("```")[0])
    receiver["receivers"][0]["webhook_configs"][0]["http_config"]["authorization"] = {
        "type": "Bearer",
        "credentials": "token",  # credentials_file must exist; the shape is the same
    }
    checked = tmp_path / "alertmanager.yml"
    checked.write_text(yaml.safe_dump({"route": {"receiver": "kelpie"}, **receiver}))
    amtool = subprocess.run(["amtool", "check-config", str(checked)], capture_output=True)
    assert amtool.returncode == 0, amtool.stdout + amtool.stderr


async def test_the_global_turn_limits_apply_and_a_group_refused_by_them_costs_no_hour(
    world: World,
):
    port = free_port()
    override = merge(alerting(port, limit=2), {"agent": {"max_turns_per_channel": 1}})
    await world.start_bot(override)
    release = world.model.reply_held(then=TextStep("First, held."))
    world.model.reply_text("Third.")
    await post(port, payload('{}:{alertname="CapA"}', [fired("CapA", "p-0")]))
    a = await header(world, "CapA", "Firing")
    await world.model.wait_for_requests(1)
    await post(port, payload('{}:{alertname="CapB"}', [fired("CapB", "p-0")]))
    b = await header(world, "CapB", "Firing")
    refused = await thread_line(world, b.ts, "No investigation ran")
    assert "turn limit per channel (1)" in refused.text
    release.set()
    await thread_line(world, a.ts, "First, held.")
    await world.drain()
    await post(port, payload('{}:{alertname="CapC"}', [fired("CapC", "p-0")]))
    c = await header(world, "CapC", "Firing")
    await thread_line(world, c.ts, "Third.")  # B's refusal left the hour's second


async def test_two_replicas_share_the_channels_hour(any_db_world: World):
    world = any_db_world  # SQLite and PostgreSQL (an advisory lock per channel there)
    ports = free_port(), free_port()
    for port in ports:
        await world.start_bot(alerting(port, limit=1))
    world.model.reply_default(TextStep("Investigated."))
    names = [f"Shared{index}" for index in range(6)]
    await asyncio.gather(
        *(
            post(ports[index % 2], payload(f'{{}}:{{alertname="{name}"}}', [fired(name, "p")]))
            for index, name in enumerate(names)
        )
    )
    said = []
    for name in names:
        shown = await header(world, name, "Firing")
        said.append((await thread_line(world, shown.ts, "Investigated.", "No investigation")).text)
    assert said.count("Investigated.") == 1 and len(world.model.requests) == 1


async def test_a_change_an_alert_investigation_proposes_is_a_card_a_person_decides(world: World):
    port = free_port()
    override = alerting(port)
    override["alerts"]["routes"][1]["channel"] = OPS_CHANNEL
    override["channels"].append(
        {"match": {"id": OPS_CHANNEL}, "role": "operator", "namespace": "shop"}
    )
    await world.start_bot(override)
    world.model.reply_tool_calls(
        [("scale_deployment", {"namespace": "shop", "name": "checkout-api", "replicas": 5})]
    )
    world.model.reply_text("Scaled.")
    await post(port, payload('{}:{alertname="Proposes"}', [fired("Proposes", "checkout-0")]))

    def found(server: Any) -> Message | None:
        shown = [m for m in server.channel_messages(OPS_CHANNEL) if "Proposes" in m.text]
        return shown[0] if shown else None

    first: Message = await world.slack.wait_for(found, timeout=30)
    card = await wait_card(world, first.ts)
    assert "the alert (alertmanager)" in card_text(card)
    assert "Approve" in json.dumps(card.blocks)  # waits for a person: the alert decides nothing
    await click(world, CAROL, card)
    await world.slack.wait_for(
        lambda s: any("Scaled." in m.text for m in s.thread(OPS_CHANNEL, first.ts)), timeout=30
    )


@pytest.mark.parametrize(
    ("override", "said"),
    [
        ({"routes": [{"match_re": {"namespace": "shop("}, "channel": "C0A"}]}, "regular expr"),
        ({"receivers": [{"type": "grafana", "auth": {"method": "basic"}}]}, "username_env"),
        ({"receivers": [{"type": "alertmanager", "auth": {"method": "bearer"}}]}, "token_env"),
        ({"routes": [{"channel": "#oncall"}]}, "channel"),
    ],
)
def test_alerts_config_mistakes_are_refused_with_a_sentence(
    world: World, override: dict[str, Any], said: str
):
    with pytest.raises(ConfigError, match=said):
        parse_config(merge(world.config_data, {**alerting(), "alerts": override}))


def test_receivers_in_socket_mode_need_their_own_listener(world: World):
    data = merge(world.config_data, alerting())
    del data["server"]["alerts"]
    with pytest.raises(ConfigError, match=r"server\.alerts"):
        parse_config(data)


async def test_a_large_chunked_notification_is_read_whole(world: World):
    port = free_port()
    await world.start_bot(alerting(port))
    world.model.reply_default(TextStep("Investigated."))
    alerts = [fired("Chunked", f"pod-{index}", note="x" * 2000) for index in range(200)]
    body = json.dumps(payload('{}:{alertname="Chunked"}', alerts)).encode()

    async def pieces() -> Any:
        for start in range(0, len(body), 1000):
            yield body[start : start + 1000]

    headers = {"Authorization": f"Bearer {ALERTS_TOKEN}", "Content-Type": "application/json"}
    async with aiohttp.ClientSession() as session:
        url = f"http://127.0.0.1:{port}/alerts/alertmanager"
        async with session.post(url, data=pieces(), headers=headers) as answer:
            assert answer.status == 200, await answer.text()
    await header(world, "Chunked", "(200 alert(s))")


async def test_a_person_who_may_not_stop_an_alerts_investigation_is_told_whose_it_is(
    world: World,
):
    port = free_port()
    await world.start_bot(alerting(port))
    release = world.model.reply_held(then=TextStep("Held, then done."))
    await post(port, payload('{}:{alertname="Unstoppable"}', [fired("Unstoppable", "p-0")]))
    first = await header(world, "Unstoppable", "Firing")
    await world.model.wait_for_requests(1)
    # ALICE did not ask (the alert did) and #shop-oncall's role has no approvers.
    await click_stop(world, ALICE, SHOP_CHANNEL, first.ts)
    (whisper,) = await world.slack.wait_for(lambda s: s.ephemerals(SHOP_CHANNEL, ALICE), timeout=20)
    assert "the alert (alertmanager)" in whisper.text and "<@" not in whisper.text
    release.set()
    await thread_line(world, first.ts, "Held, then done.")


async def test_a_repeat_that_says_something_new_refreshes_the_header(world: World):
    port = free_port()
    bot = await world.start_bot(alerting(port))
    world.model.reply_default(TextStep("Investigated."))
    group = '{}:{alertname="Says"}'
    alert = fired("Says", "checkout-0")
    await post(port, payload(group, [alert]))
    first = await header(world, "Says", "checkout-0 restarts")
    await thread_line(world, first.ts, "Investigated.")
    # Alertmanager's repeat: the same alert, its summary changed since.
    changed = {**alert, "annotations": {"summary": "checkout-0 restarts every minute now"}}
    assert (await post(port, payload(group, [changed])))[0] == 200
    await header(world, "Says", "every minute now")
    # The same repeat again is a redelivery: handled once.
    assert (await post(port, payload(group, [changed])))[0] == 200
    assert metric(bot, "deduplicated") == 1
    assert len(headers_of(world, "Says")) == 1 and len(world.model.requests) == 1


async def test_each_alert_group_is_its_own_asker_for_the_per_asker_cap(world: World):
    port = free_port()
    await world.start_bot(merge(alerting(port), {"agent": {"max_turns_per_person": 1}}))
    release = world.model.reply_held(then=TextStep("First, held."))
    world.model.reply_text("Second, meanwhile.")
    await post(port, payload('{}:{alertname="AskerA"}', [fired("AskerA", "p-0")]))
    a = await header(world, "AskerA", "Firing")
    await world.model.wait_for_requests(1)
    # A's investigation runs; B's group is another asker, not the receiver's second turn.
    await post(port, payload('{}:{alertname="AskerB"}', [fired("AskerB", "p-0")]))
    b = await header(world, "AskerB", "Firing")
    said = await thread_line(world, b.ts, "Second, meanwhile.", "No investigation ran")
    assert said.text == "Second, meanwhile."
    release.set()
    await thread_line(world, a.ts, "First, held.")


async def test_killed_after_slack_took_the_header_the_takeover_finds_it_and_posts_none(
    world: World, launch: Launcher
):
    port = free_port()
    start = launch({**alerting(port), "database": {"lease_s": 3}})
    bot = await start()
    await _listening(port)
    world.model.reply_text("Investigated in the first header's thread.")
    # Slack posts the header but its answer never reaches kelpie: killed meanwhile.
    held = world.slack.hold_answer("chat.postMessage", lambda p: "Unrecorded" in str(p.get("text")))
    notification = payload('{}:{alertname="Unrecorded"}', [fired("Unrecorded", "checkout-0")])
    assert (await post(port, notification))[0] == 200
    first = await header(world, "Unrecorded", "Firing")
    bot.kill()
    held.set()
    world.slack.clear_faults()
    await start()
    await thread_line(world, first.ts, "Investigated in the first header's thread.", timeout=120)
    assert len(headers_of(world, "Unrecorded")) == 1
    [looked] = world.slack.calls_to("conversations.history")
    assert looked.params["channel"] == SHOP_CHANNEL
    assert first.metadata and first.metadata["event_type"] == "kelpie_alert"
