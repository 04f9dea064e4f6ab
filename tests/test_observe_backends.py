"""Loki (its documented API, tests/peers/loki_server.py) and a real Alertmanager, as kelpie's
observability clients read and write them: bounded, scoped, errors as sentences."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta

import pytest
import pytest_asyncio

from bot.toolsets.observe.alertmanager import (
    Alertmanager,
    SilenceMatcher,
    SilenceRequest,
    render_alerts,
)
from bot.toolsets.observe.http import Endpoint, ObserveError, ObserveHttp
from bot.toolsets.observe.loki import Loki, render_lines
from bot.toolsets.observe.scope import NamespaceScope, scope_logql
from tests.peers.alertmanager import AlertmanagerServer
from tests.peers.loki_server import LokiServer

# The Loki fake runs on the module's loop, shared by its tests.
pytestmark = pytest.mark.asyncio(loop_scope="module")
SHOP = NamespaceScope(patterns=("shop",))
NOW = time.time()


def endpoint(kind: str, url: str) -> Endpoint:
    return Endpoint(kind=kind, name="main", url=url, cluster=None, timeout_s=10)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def loki() -> AsyncIterator[LokiServer]:
    server = LokiServer()
    for second in range(700):
        for namespace in ("shop", "payments"):
            level = "error" if second % 7 == 0 else "info"
            line = f"level={level} msg=request {second} in {namespace}"
            server.push({"namespace": namespace, "app": "checkout"}, NOW - 700 + second, line)
    await server.start()
    yield server
    await server.stop()


@pytest_asyncio.fixture(loop_scope="module")
async def http() -> AsyncIterator[ObserveHttp]:
    client = ObserveHttp()
    yield client
    await client.close()


async def test_log_lines_are_newest_first_bounded_and_scoped(loki, http):
    client = Loki(http, endpoint("loki", loki.url), max_window_h=24, max_series=50)
    query = scope_logql('{app="checkout"} |= "level=error"', SHOP)
    default = await client.lines(query, NOW - 3600, NOW, None)
    assert len(default.lines) == 100 and default.limit == 100
    assert all(entry.labels["namespace"] == "shop" for entry in default.lines)
    assert [e.at_ns for e in default.lines] == sorted(
        (e.at_ns for e in default.lines), reverse=True
    )
    assert "level=error msg=request 693 in shop" in default.lines[0].line
    assert loki.queries[-1]["query"] == '{app="checkout",namespace=~"shop"} |= "level=error"'
    assert loki.queries[-1]["limit"] == "100"

    everything = await client.lines(scope_logql('{app="checkout"}', SHOP), NOW - 3600, NOW, 5000)
    assert len(everything.lines) == 500 and loki.queries[-1]["limit"] == "500"
    assert render_lines(everything).endswith("(asked for 5000 lines; at most 500 are read)")


async def test_a_loki_metric_query_is_summarised_like_a_range(loki, http):
    client = Loki(http, endpoint("loki", loki.url), max_window_h=24, max_series=50)
    query = scope_logql(
        'sum by (namespace) (count_over_time({app="checkout"} |= "error" [1m]))', SHOP
    )
    result = await client.metric(query, NOW - 600, NOW)
    [series] = result.series
    assert series.labels == {"namespace": "shop"} and series.maximum in (8, 9)


async def test_lokis_errors_are_sentences(loki, http):
    client = Loki(http, endpoint("loki", loki.url), max_window_h=24, max_series=50)
    with pytest.raises(
        ObserveError, match=r"Loki main refused the request \(400\): queries require"
    ):
        await client.lines('{app=~".*"}', NOW - 60, NOW, 10)
    with pytest.raises(ObserveError, match="at most 24 h may be queried"):
        await client.lines('{app="checkout"}', NOW - 30 * 3600, NOW, 10)
    with pytest.raises(ObserveError, match="That is a log query; use loki_query"):
        await client.metric('{app="checkout"}', NOW - 60, NOW)


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
        + [{"labels": {"alertname": "NodeDiskFull", "node": "n1"}, "startsAt": starts}]
    )
    yield server
    server.stop()


async def test_active_alerts_are_only_the_roles(alertmanager, http):
    client = Alertmanager(http, endpoint("alertmanager", alertmanager.url), max_silence_h=4)
    assert (await client.ready()).startswith("Alertmanager ")
    shop = await client.alerts(SHOP)
    assert [(a.name, a.labels["namespace"]) for a in shop] == [("KubePodCrashLooping", "shop")]
    assert "a pod in shop restarts" in render_alerts(shop)
    with_nodes = await client.alerts(NamespaceScope(("shop",), cluster_metrics=True))
    assert sorted(a.name for a in with_nodes) == ["KubePodCrashLooping", "NodeDiskFull"]


async def test_a_silence_lands_once_inside_the_role_and_is_refused_outside(alertmanager, http):
    client = Alertmanager(http, endpoint("alertmanager", alertmanager.url), max_silence_h=4)
    matchers = (
        SilenceMatcher("namespace", "shop"),
        SilenceMatcher("alertname", "KubePodCrashLooping"),
    )
    request = SilenceRequest(matchers, timedelta(hours=1), "deploy in progress", "kelpie for U1")
    client.check_silence(request, SHOP)
    silence_id = await client.silence(request, datetime.now(UTC))
    [silence] = alertmanager.silences()
    assert silence["id"] == silence_id and silence["createdBy"] == "kelpie for U1"
    [shop] = await client.alerts(SHOP)
    assert shop.silenced_by == (silence_id,)

    elsewhere = SilenceRequest(
        (SilenceMatcher("namespace", "payments"), matchers[1]), timedelta(hours=1), "x", "y"
    )
    with pytest.raises(ObserveError, match="must match one namespace by equality"):
        client.check_silence(elsewhere, SHOP)
    too_long = SilenceRequest(matchers, timedelta(hours=5), "x", "y")
    with pytest.raises(ObserveError, match="at most 4 h"):
        client.check_silence(too_long, SHOP)
