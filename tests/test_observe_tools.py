"""The observability tools through the real engine and pipeline, in channels whose roles
reach `shop` only: a real Prometheus (its query log shows what kelpie sent), a real
Alertmanager, Loki's documented API (tests/peers/loki_server.py), the scripted model and the
fake Slack. What is asserted is what the peers received and what the model and people saw."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from bot.agent.engine import INVESTIGATOR_NOTE
from bot.app import buildable_tools
from bot.checks import observability_checks
from bot.config import ConfigError, RoleConfig, Secrets, parse_config
from bot.pipeline.roles import ChannelBinding, common_role, narrower, role_within
from bot.toolsets.observe.graph import NEEDS_MATPLOTLIB, graph_tool
from bot.toolsets.observe.http import Endpoint, ObserveHttp
from bot.toolsets.observe.instances import Instances
from bot.toolsets.observe.tools import Observe, ObserveSettings
from bot.toolsets.observe.toolset import observe_tools
from bot.toolsets.observe.window import span
from bot.toolsets.spec import Reach, ToolContext, ToolFailure
from tests.peers.alertmanager import AlertmanagerServer
from tests.peers.loki_server import LokiServer
from tests.peers.model_server import DynamicStep, TextStep, tool_calls_step
from tests.peers.prometheus import PrometheusServer, Sample
from tests.postgres import free_port
from tests.test_approvals import approval_id, card_text, click, wait_card, wait_said
from tests.test_inbox_at_rest import every_row
from tests.world import (
    ALICE,
    CAROL,
    LOKI_TENANT,
    LOKI_TOKEN,
    OPS_CHANNEL,
    SHOP_CHANNEL,
    World,
    environ,
)

PLANTED = "AKIAIOSFODNN7EXAMPL3"  # an AWS access key id the masker knows
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def now() -> float:
    """A minute ago when this module starts, not at import: the bot queries at the real time
    and Prometheus looks back 5 minutes, so series ending at import would be gone when the
    whole fast tier reaches this module."""
    return time.time() - 60


@pytest.fixture(scope="module")
def prometheus(now: float) -> Iterator[PrometheusServer]:
    server = PrometheusServer()
    samples = []
    for minute in range(90):
        at = now - (89 - minute) * 60
        for namespace in ("shop", "payments"):
            labels = {"namespace": namespace, "pod": f"{namespace}-0"}
            samples.append(Sample("container_cpu", labels, 0.5 + minute / 100, at))
        samples.append(Sample("node_load1", {"instance": "node-1"}, 1.5, at))
    server.load(samples, types={"container_cpu": "gauge", "node_load1": "gauge"})
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def alertmanager() -> Iterator[AlertmanagerServer]:
    server = AlertmanagerServer()
    server.start()
    starts = datetime.now(UTC).isoformat()
    server.post_alerts(
        [
            {
                "labels": {"alertname": "KubePodCrashLooping", "namespace": ns, "pod": f"{ns}-0"},
                "annotations": {"summary": f"a pod in {ns} restarts"},
                "startsAt": starts,
            }
            for ns in ("shop", "payments")
        ]
    )
    yield server
    server.stop()


@pytest.fixture
async def loki() -> AsyncIterator[LokiServer]:
    """A multi-tenant Loki: without the configured X-Scope-OrgID a query is refused."""
    server = LokiServer(tenant_required=True)
    now = time.time() - 60
    for second in range(600):
        for namespace in ("shop", "payments"):
            line = f"level=info msg=request {second} in {namespace}"
            server.push({"namespace": namespace, "app": "checkout"}, now - 600 + second, line)
    server.push({"namespace": "shop", "app": "checkout"}, now - 0.5, f"boot key {PLANTED}")
    await server.start()
    yield server
    await server.stop()


def observing(prometheus: PrometheusServer, loki: str, alertmanager: str) -> dict[str, Any]:
    """OPS_CHANNEL: a role reaching shop only (silences approved by CAROL); SHOP_CHANNEL:
    shop and series without a namespace (cluster_metrics)."""
    return {
        "observability": {
            "prometheus": [
                {"name": "main", "url": prometheus.url, "external_url": "https://prom.example"}
            ],
            "loki": [
                {
                    "name": "logs",
                    "url": loki,
                    "headers": {"X-Scope-OrgID": "KELPIE_TEST_LOKI_TENANT"},
                    "auth": {"method": "environment", "env": "KELPIE_TEST_LOKI_TOKEN"},
                }
            ],
            "alertmanager": [{"name": "am", "url": alertmanager}],
        },
        "roles": {
            "shop-only": {
                "tools": ["present/*", "read/*", "diagnose/*", "write/silence_alert"],
                "namespaces": ["shop"],
                "approval": {"approvers": {"users": [CAROL]}, "allow_requester": False},
            },
            "shop-nodes": {
                "tools": ["read/*"],
                "namespaces": ["shop"],
                "observability": {"cluster_metrics": True},
            },
        },
        "channels": [
            {"match": {"id": OPS_CHANNEL}, "role": "shop-only", "namespace": "shop"},
            # No default namespace: the queries scope themselves, no gate needs one.
            {"match": {"id": SHOP_CHANNEL}, "role": "shop-nodes"},
        ],
    }


async def start(world: World, prometheus, loki, alertmanager) -> None:
    await world.start_bot(observing(prometheus, loki.url, alertmanager.url))


async def ask(world: World, channel: str, calls: list[tuple[str, dict[str, Any]]]) -> str:
    """One turn: the model makes `calls`, then answers; the thread's ts."""
    asked = len(world.model.requests)
    world.model.reply_tool_calls(calls)
    world.model.reply_text("Answered [E1].")
    mention = await world.mention(channel, ALICE, "how is shop doing?")
    await world.wait_bot_replies(channel, mention["ts"], 1)
    await world.model.wait_for_requests(asked + 2, timeout=20)
    return str(mention["ts"])


def results(world: World) -> list[str]:
    """The tool results the model received, as its last request carried them."""
    messages = world.model.requests[-1]["messages"]
    return [str(m["content"]) for m in messages if m["role"] == "tool"]


def everything_sent_to_the_model(world: World) -> str:
    return json.dumps(world.model.requests)


def contents(world: World) -> str:
    """Every message's text of the model's last request."""
    return "\n".join(str(m.get("content") or "") for m in world.model.requests[-1]["messages"])


async def test_a_range_query_is_scoped_to_shop_in_prometheus_query_log_and_cited(
    world: World, prometheus, loki, alertmanager
):
    await start(world, prometheus, loki, alertmanager)
    await ask(world, OPS_CHANNEL, [("prometheus_range", {"query": "avg(container_cpu)"})])

    [scoped] = [q for q in prometheus.queries() if q.startswith("avg(container_cpu")]
    assert scoped == 'avg(container_cpu{namespace=~"shop",namespace!~"kube\\\\-system"})'
    [result] = results(world)
    assert result.startswith("[E1] 1 series") and "max 1.39" in result
    # The ledger shows the query as sent, the instance and the window.
    assert f'[E1] prometheus_range sent {scoped} to prometheus "main", 20' in contents(world)


async def test_a_query_naming_payments_is_refused_and_never_sent(
    world: World, prometheus, loki, alertmanager
):
    await start(world, prometheus, loki, alertmanager)
    before = list(prometheus.queries())
    query = 'container_cpu{namespace="payments"}'
    await ask(world, OPS_CHANNEL, [("prometheus_query", {"query": query})])

    assert prometheus.queries() == before
    [result] = results(world)
    assert "namespace 'payments', which this channel may not read; it may read shop" in result


async def test_node_metrics_only_where_the_role_allows_series_without_a_namespace(
    world: World, prometheus, loki, alertmanager
):
    await start(world, prometheus, loki, alertmanager)
    await ask(world, OPS_CHANNEL, [("prometheus_query", {"query": "node_load1", "time": "5m"})])
    assert results(world) == ["[E1] No series matched."]

    await ask(world, SHOP_CHANNEL, [("prometheus_query", {"query": "node_load1", "time": "5m"})])
    [result] = results(world)
    assert 'node_load1{instance="node-1"} 1.5' in result
    assert prometheus.queries()[-1] == 'node_load1{namespace=~"shop|",namespace!~"kube\\\\-system"}'


async def test_log_lines_are_bounded_newest_first_and_masked(
    world: World, prometheus, loki, alertmanager
):
    await start(world, prometheus, loki, alertmanager)
    await ask(world, OPS_CHANNEL, [("loki_query", {"query": '{app="checkout"}', "limit": 900})])

    assert loki.queries[-1]["limit"] == "500"
    assert loki.queries[-1]["query"].startswith('{app="checkout",namespace=~"shop"')
    [result] = results(world)
    # The model's share of a result is cut to its budget; what it reads is the newest.
    lines = result.removeprefix("[E1] ").splitlines()
    assert "boot key" in lines[0] and "payments" not in result
    assert [int(line.split("request ")[1].split()[0]) for line in lines[1:4]] == [599, 598, 597]
    assert PLANTED not in everything_sent_to_the_model(world)


async def test_lokis_headers_arrive_and_its_token_reaches_no_one(
    world: World, prometheus, loki, alertmanager, caplog: pytest.LogCaptureFixture
):
    caplog.set_level(logging.DEBUG)
    await start(world, prometheus, loki, alertmanager)
    await ask(world, OPS_CHANNEL, [("loki_query", {"query": '{app="checkout"} |= "boot"'})])

    [received] = [r for r in loki.requests if r.path == "/loki/api/v1/query_range"]
    assert received.headers["X-Scope-OrgID"] == LOKI_TENANT
    assert received.headers["Authorization"] == f"Bearer {LOKI_TOKEN}"
    [result] = results(world)
    assert "boot key" in result  # the tenant's answer, not `no org id`
    # The token is Loki's alone: not the model's, Slack's, the log's or the store's.
    assert LOKI_TOKEN not in everything_sent_to_the_model(world)
    assert LOKI_TOKEN not in json.dumps([call.params for call in world.slack.calls])
    assert LOKI_TOKEN not in caplog.text
    await world.drain()
    assert LOKI_TOKEN not in await every_row(world.config.database.url)


async def test_a_loki_without_its_tenant_header_is_one_sentence(
    world: World, prometheus, loki, alertmanager
):
    config = observing(prometheus, loki.url, alertmanager.url)
    del config["observability"]["loki"][0]["headers"]
    await world.start_bot(config)
    await ask(world, OPS_CHANNEL, [("loki_query", {"query": '{app="checkout"}'})])
    [received] = [r for r in loki.requests if r.path == "/loki/api/v1/query_range"]
    assert "X-Scope-OrgID" not in received.headers
    [result] = results(world)
    assert "401" in result and LOKI_TOKEN not in everything_sent_to_the_model(world)


async def test_active_alerts_are_only_the_roles_namespaces(
    world: World, prometheus, loki, alertmanager
):
    await start(world, prometheus, loki, alertmanager)
    await ask(world, OPS_CHANNEL, [("list_alerts", {})])

    [result] = results(world)
    assert "KubePodCrashLooping [active]" in result and "a pod in shop restarts" in result
    assert "payments" not in result


def silences_commented(alertmanager: AlertmanagerServer, word: str) -> list[dict[str, Any]]:
    return [s for s in alertmanager.silences() if word in s["comment"]]


async def propose_silence(world: World, word: str) -> tuple[Any, Any]:
    world.model.reply_tool_calls(
        [
            (
                "silence_alert",
                {
                    "matchers": {"alertname": "KubePodCrashLooping"},
                    "duration": "2h",
                    "comment": f"rollout {word}",
                    "reason": "known crash during the rollout",
                },
            )
        ]
    )
    mention = await world.mention(OPS_CHANNEL, ALICE, "silence the crashloop alert for 2h")
    return mention, await wait_card(world, mention["ts"])


async def test_a_silence_needs_an_approval_and_lands_once(
    world: World, prometheus, loki, alertmanager
):
    await start(world, prometheus, loki, alertmanager)
    mention, card = await propose_silence(world, "approved-one")
    assert silences_commented(alertmanager, "approved-one") == []
    text = card_text(card)
    assert '"comment": "rollout approved-one (asked by U0ALICE through kelpie)"' in text
    assert '"name": "namespace", "value": "shop"' in text
    assert "Preview (the exact call, not sent yet)" in text and "dry run" not in text

    world.model.reply_text("Silenced.")
    approval = approval_id(card)
    await click(world, CAROL, card)
    await wait_said(world, mention["ts"], "Silenced.")
    await click(world, CAROL, card, value=approval)  # a second click changes nothing
    await world.drain()
    [silence] = silences_commented(alertmanager, "approved-one")
    assert silence["createdBy"] == "kelpie for U0ALICE"
    matchers = {(m["name"], m["value"]) for m in silence["matchers"]}
    assert matchers == {("namespace", "shop"), ("alertname", "KubePodCrashLooping")}


async def test_a_rejected_silence_sends_nothing(world: World, prometheus, loki, alertmanager):
    await start(world, prometheus, loki, alertmanager)
    mention, card = await propose_silence(world, "rejected-one")
    world.model.reply_text("Not silenced.")
    await click(world, CAROL, card, "kelpie_reject")
    await wait_said(world, mention["ts"], "Not silenced.")
    await world.drain()
    assert silences_commented(alertmanager, "rejected-one") == []


async def test_show_graph_posts_a_png_with_the_query_and_a_link(
    world: World, prometheus, loki, alertmanager
):
    await start(world, prometheus, loki, alertmanager)
    world.model.reply_tool_calls([("show_graph", {"query": "container_cpu", "start": "1h"})])
    mention = await world.mention(OPS_CHANNEL, ALICE, "graph shop's cpu")

    def uploaded(server: Any) -> Any:
        done = [f for f in server.files.values() if f.completed]
        return done[-1] if done else None

    picture = await world.slack.wait_for(uploaded, timeout=20)
    assert picture.content.startswith(PNG_SIGNATURE) and picture.thread_ts == mention["ts"]
    scoped = prometheus.queries()[-1]
    assert scoped.startswith('container_cpu{namespace=~"shop"')
    assert f"`{scoped}`" in picture.initial_comment
    assert "https://prom.example/graph?g0.expr=container_cpu" in picture.initial_comment


async def test_show_graph_without_matplotlib_says_how_to_install_it(
    prometheus, now: float, caplog: pytest.LogCaptureFixture
):
    """An image or install without the `graphs` extra: the model gets the install sentence
    and the log says why, rather than a traceback."""
    imported: list[str] = []

    def without_matplotlib(name: str) -> Any:
        imported.append(name)
        raise ModuleNotFoundError(f"No module named {name.split('.')[0]!r}", name=name)

    http = ObserveHttp()
    main = Endpoint(kind="prometheus", name="main", url=prometheus.url, cluster=None, timeout_s=10)
    observe = Observe(http, Instances((main,)), ObserveSettings(), clock=lambda: now)
    context = ToolContext("prod", reach=Reach(("shop",)))
    query = {"query": "container_cpu", "start": "1h"}
    try:
        with pytest.raises(ToolFailure) as failure:
            await graph_tool(observe, importer=without_matplotlib).handler(query, context)
        drawn = await graph_tool(observe).handler(query, context)  # the real import
    finally:
        await http.close()
    assert str(failure.value) == NEEDS_MATPLOTLIB
    assert NEEDS_MATPLOTLIB.endswith("pip install kelpie[graphs].")
    assert imported == ["matplotlib.figure"]
    assert "show_graph: matplotlib cannot be imported (No module named 'matplotlib')" in (
        caplog.text
    )
    assert drawn.picture is not None and drawn.picture.png.startswith(PNG_SIGNATURE)


async def test_kelpie_check_proves_each_instance(world: World, prometheus, alertmanager):
    data = dict(world.config_data)
    closed = f"http://127.0.0.1:{free_port()}"
    data["observability"] = {
        "prometheus": [{"name": "main", "url": prometheus.url}],
        "loki": [{"name": "logs", "url": closed, "cluster": "prod"}],
        "alertmanager": [{"name": "am", "url": alertmanager.url}],
    }
    config = parse_config(data)
    lines = [r.line() for r in await observability_checks(config, Secrets(config, {}))]
    assert lines[0].startswith("ok   prometheus main: Prometheus 2") and prometheus.url in lines[0]
    assert lines[1].startswith(f"FAIL loki logs: Loki logs ({closed}) is unreachable")
    assert lines[2].startswith("ok   alertmanager am: Alertmanager ")
    assert len(lines) == 3


def test_a_missing_header_variable_is_one_startup_sentence(world: World):
    data = dict(world.config_data)
    data["observability"] = {
        "loki": [
            {
                "name": "logs",
                "url": "http://127.0.0.1:1",
                "headers": {"X-Scope-OrgID": "KELPIE_TEST_TENANT"},
                "auth": {"method": "environment", "env": "KELPIE_TEST_LOKI_TOKEN"},
            }
        ]
    }
    config = parse_config(data)
    env = environ(world.slack) | {"KELPIE_TEST_LOKI_TOKEN": "tok-123"}
    problems = Secrets(config, env).check_all()
    expected = (
        "observability.loki[0].headers.X-Scope-OrgID: environment variable "
        "KELPIE_TEST_TENANT is not set"
    )
    assert problems == [expected]
    with pytest.raises(ConfigError) as raised:
        Instances.from_config(config.observability, Secrets(config, env))
    assert str(raised.value).strip() == expected and "tok-123" not in str(raised.value)

    both = env | {"KELPIE_TEST_TENANT": "team-shop"}
    [endpoint] = Instances.from_config(config.observability, Secrets(config, both)).endpoints
    headers = {"Authorization": "Bearer tok-123", "X-Scope-OrgID": "team-shop"}
    assert dict(endpoint.headers) == headers


async def test_a_context_made_without_a_role_reaches_no_namespace(prometheus, now: float):
    """Tests and the CLI build contexts without a role: they read nothing, not everything.
    The toolset's clock (not the wall clock) places the window."""
    http = ObserveHttp()
    main = Endpoint(kind="prometheus", name="main", url=prometheus.url, cluster=None, timeout_s=10)
    observe = Observe(http, Instances((main,)), ObserveSettings(), clock=lambda: now)
    tools = {tool.name: tool for tool in observe_tools(observe)}
    try:
        query = {"query": "container_cpu or node_load1", "start": "30m"}
        result = await tools["prometheus_range"].handler(query, ToolContext("prod"))
    finally:
        await http.close()

    sent = prometheus.queries()[-1]
    assert 'namespace=~"$^",namespace!=""' in sent
    assert result.text.startswith("0 series")
    assert result.evidence == f'sent {sent} to prometheus "main", {span(now - 1800, now)}'


async def test_a_cluster_without_an_instance_gets_one_sentence(prometheus, now: float):
    """An instance naming another cluster is not this one's; none without a cluster either."""
    http = ObserveHttp()
    staging = Endpoint(
        kind="prometheus", name="staging", url=prometheus.url, cluster="staging", timeout_s=10
    )
    observe = Observe(http, Instances((staging,)), ObserveSettings(), clock=lambda: now)
    tools = {tool.name: tool for tool in observe_tools(observe, kinds=("prometheus", "loki"))}
    before = list(prometheus.queries())
    try:
        with pytest.raises(ToolFailure, match=r"^No Prometheus is configured for cluster prod\.$"):
            await tools["prometheus_query"].handler({"query": "up"}, ToolContext("prod"))
        with pytest.raises(ToolFailure, match=r"^No Loki is configured for cluster prod\.$"):
            await tools["loki_query"].handler({"query": '{app="x"}'}, ToolContext("prod"))
        answered = await tools["prometheus_query"].handler({"query": "up"}, ToolContext("staging"))
    finally:
        await http.close()
    assert answered.text == "No series matched." and len(prometheus.queries()) == len(before) + 1


async def test_a_background_investigation_keeps_the_channels_reach(
    world: World, prometheus, loki, alertmanager
):
    main: list[Any] = [
        tool_calls_step([("spawn_investigation", {"label": "cpu", "question": "CPU?"})]),
        TextStep("Waiting for the helper."),
        TextStep("CPU is fine."),
    ]
    side: list[Any] = [
        tool_calls_step([("prometheus_query", {"query": "max(container_cpu) by (namespace)"})]),
        TextStep("Only shop's CPU is visible [E1]."),
    ]

    def decide(body: dict[str, Any]) -> Any:
        system = body["messages"][0]["content"]
        return (side if INVESTIGATOR_NOTE in system else main).pop(0)

    world.model.reply_default(DynamicStep(decide))
    await start(world, prometheus, loki, alertmanager)
    mention = await world.mention(OPS_CHANNEL, ALICE, "how is the cpu?")
    await wait_said(world, mention["ts"], "CPU is fine.")
    assert main == [] and side == []
    assert prometheus.queries()[-1] == (
        'max by (namespace)(container_cpu{namespace=~"shop",namespace!~"kube\\\\-system"})'
    )


def test_a_turn_admitted_without_cluster_metrics_never_gains_them():
    """A turn keeps the narrower of its admitted role and today's: cluster_metrics too."""
    tools = buildable_tools()
    plain = RoleConfig(tools=["read/*"], namespaces=["shop"])
    nodes = RoleConfig(
        tools=["read/*"], namespaces=["shop"], observability={"cluster_metrics": True}
    )
    assert role_within(plain, nodes, tools) and not role_within(nodes, plain, tools)
    other = RoleConfig(
        tools=["read/prometheus_*"], namespaces=["shop"], observability={"cluster_metrics": True}
    )
    both = common_role(plain, other, tools)
    assert both is not None and both.observability.cluster_metrics is False
    admitted = ChannelBinding("nodes", nodes, "prod", "shop")
    now = ChannelBinding("plain", plain, "prod", "shop")
    narrowed = narrower(admitted, now, tools)
    assert narrowed is not None and narrowed.tool_context().reach == Reach(("shop",), False)
    assert admitted.tool_context().reach == Reach(("shop",), True)
