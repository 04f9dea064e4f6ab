"""A role's namespaces inside PromQL and LogQL: every selector scoped by a real parser, a
namespace outside the role refused, and a real Prometheus that answers only what the scope
admits (its query log shows the exact query sent)."""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator

import promql_parser as promql
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.toolsets.observe.http import Endpoint, ObserveError, ObserveHttp
from bot.toolsets.observe.prometheus import Prometheus, auto_step, render_instant, render_range
from bot.toolsets.observe.scope import NamespaceScope, QueryRefused, scope_logql, scope_promql
from tests.peers.prometheus import PrometheusServer, Sample

SHOP = NamespaceScope(patterns=("shop",))
SHOP_AND_TEAMS = NamespaceScope(patterns=("shop", "team-*"))
SHOP_WITH_NODES = NamespaceScope(patterns=("shop",), cluster_metrics=True)
EVERYTHING = NamespaceScope(patterns=("*",))


def selectors(query: str) -> list[promql.VectorSelector]:
    found: list[promql.VectorSelector] = []
    promql.walk(
        promql.parse(query),
        pre_visit=lambda node: (
            found.append(node) if isinstance(node, promql.VectorSelector) else None
        ),
    )
    return found


def namespace_matchers(selector: promql.VectorSelector) -> set[tuple[str, str]]:
    return {(str(m.op), m.value) for m in selector.matchers.matchers if m.name == "namespace"}


@pytest.mark.parametrize(
    ("query", "scoped"),
    [
        ("up", 'up{namespace=~"shop"}'),
        (
            'sum by (pod) (rate(http_requests_total{code=~"5.."}[5m]))',
            'sum by (pod)(rate(http_requests_total{code=~"5..",namespace=~"shop"}[5m]))',
        ),
        ("a / on (pod) b", 'a{namespace=~"shop"} / on (pod) b{namespace=~"shop"}'),
        ('up{namespace="shop"} offset 1h', 'up{namespace="shop",namespace=~"shop"} offset 1h'),
        (
            "max_over_time(cpu[10m:1m])",
            'max_over_time(cpu{namespace=~"shop"}[10m:1m])',
        ),
        ('{__name__=~"kube_.+"}', '{__name__=~"kube_.+",namespace=~"shop"}'),
        ("vector(1)", "vector(1)"),
        ("up offset -5m @ end()", 'up{namespace=~"shop"} @ end() offset -5m'),
    ],
)
def test_every_selector_gets_the_roles_namespaces(query, scoped):
    assert scope_promql(query, SHOP) == scoped


def test_globs_become_anchored_alternatives_and_cluster_metrics_admit_no_label_only():
    assert scope_promql("up", SHOP_AND_TEAMS) == 'up{namespace=~"shop|team\\\\-.*"}'
    assert scope_promql("node_load1", SHOP_WITH_NODES) == 'node_load1{namespace=~"shop|"}'
    assert scope_promql("up", EVERYTHING) == 'up{namespace=~".+"}'
    denied = NamespaceScope(patterns=("*",), denied=("kube-system",))
    assert scope_promql("up", denied) == 'up{namespace=~".+",namespace!~"kube\\\\-system"}'


@pytest.mark.parametrize(
    ("query", "sentence"),
    [
        (
            'rate(errors_total{namespace="payments"}[5m])',
            "The query names namespace 'payments', which this channel may not read; "
            "it may read shop.",
        ),
        ('up{namespace=~"shop|payments"}', "namespace 'payments'"),
        ("up{", "The query is not valid PromQL"),
    ],
)
def test_what_is_refused_is_one_sentence(query, sentence):
    with pytest.raises(QueryRefused) as refused:
        scope_promql(query, SHOP)
    assert sentence in str(refused.value)
    assert "\n" not in str(refused.value)


def test_a_denied_namespace_stays_denied_under_a_wide_role():
    scope = NamespaceScope(patterns=("*",), denied=("kube-*",))
    with pytest.raises(QueryRefused, match="kube-system"):
        scope_promql('up{namespace="kube-system"}', scope)


def test_a_value_that_closes_the_selector_early_stays_a_value():
    # The parser's own printer would emit this label_replace string unescaped, turning its
    # text into a second, unscoped selector; kelpie renders selectors itself and verifies.
    hostile = 'label_replace(up, "x", "\\"} or secret_total{namespace=\\"payments", "y", "")'
    with pytest.raises(QueryRefused, match="could not be limited to this channel's namespaces"):
        scope_promql(hostile, SHOP)


label_values = st.text(alphabet='ab"\\{}=~,| \n', max_size=6)
metric_names = st.sampled_from(["up", "cpu", "errors_total"])


@st.composite
def queries(draw: st.DrawFn, depth: int = 0) -> str:
    name = draw(metric_names)
    matcher = (
        f"{draw(st.sampled_from(['job', 'namespace', 'pod']))}={json.dumps(draw(label_values))}"
    )
    selector = f"{name}{{{matcher}}}"
    if depth >= 2:
        return selector
    inner = draw(queries(depth=depth + 1))
    shapes = [
        selector,
        f"rate({selector}[5m])",
        f"sum by (pod) ({inner})",
        f"{inner} / on (pod) {selector}",
        f'label_replace({inner}, "dst", {json.dumps(draw(label_values))}, "src", "(.*)")',
        f"max_over_time({inner}[10m:1m])",
    ]
    return draw(st.sampled_from(shapes))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(queries())
def test_no_query_leaves_with_a_selector_outside_the_scope(query):
    try:
        scoped = scope_promql(query, SHOP)
    except QueryRefused:
        return
    for selector in selectors(scoped):
        assert ("MatchOp.Re", "shop") in namespace_matchers(selector), scoped


@pytest.mark.parametrize(
    ("query", "scoped"),
    [
        ('{app="checkout"}', '{app="checkout",namespace=~"shop"}'),
        (
            '{app="checkout"} |= "level=error" | json | line_format "{{.msg}}"',
            '{app="checkout",namespace=~"shop"} |= "level=error" | json | line_format "{{.msg}}"',
        ),
        (
            'sum by (pod) (count_over_time({app="a"} |~ `x{2}` [5m]))',
            'sum by (pod) (count_over_time({app="a",namespace=~"shop"} |~ `x{2}` [5m]))',
        ),
        (
            '{app="a"} or {app="b"}',
            '{app="a",namespace=~"shop"} or {app="b",namespace=~"shop"}',
        ),
    ],
)
def test_logql_stream_selectors_are_scoped_and_the_rest_kept(query, scoped):
    assert scope_logql(query, SHOP) == scoped


@pytest.mark.parametrize(
    ("query", "sentence"),
    [
        ('{namespace="payments"} |= "x"', "namespace 'payments'"),
        ('"no selector"', "it has no {…} selector"),
        ('{app="a"', "never closed"),
        ('{app="a"} |= "unterminated', "never closed"),
    ],
)
def test_logql_refusals(query, sentence):
    with pytest.raises(QueryRefused, match=sentence.replace("{…}", ".*").replace("'", "'")):
        scope_logql(query, SHOP)


NOW = time.time() - 120


@pytest.fixture(scope="module")
def prometheus() -> Iterator[PrometheusServer]:
    server = PrometheusServer()
    samples = []
    for minute in range(30):
        at = NOW - (29 - minute) * 60
        for namespace in ("shop", "payments"):
            labels = {"namespace": namespace, "pod": f"{namespace}-0"}
            samples.append(Sample("container_cpu", labels, 0.5 + minute / 100, at))
        samples.append(Sample("node_load1", {"instance": "node-1"}, 1.5, at))
    server.load(samples, types={"container_cpu": "gauge", "node_load1": "gauge"})
    server.start()
    yield server
    server.stop()


def instant(server: PrometheusServer, query: str) -> list[dict[str, str]]:
    params = urllib.parse.urlencode({"query": query, "time": f"{NOW:.3f}"})
    with urllib.request.urlopen(f"{server.url}/api/v1/query?{params}", timeout=10) as answer:
        body = json.load(answer)
    assert body["status"] == "success", body
    return [series["metric"] for series in body["data"]["result"]]


def test_the_real_prometheus_runs_the_scoped_query_and_answers_only_the_scope(prometheus):
    everything = instant(prometheus, "container_cpu or node_load1")
    assert {series.get("namespace") for series in everything} == {"shop", "payments", None}

    scoped = scope_promql("container_cpu or node_load1", SHOP)
    assert [series["namespace"] for series in instant(prometheus, scoped)] == ["shop"]
    assert prometheus.queries()[-1] == scoped

    with_nodes = scope_promql("container_cpu or node_load1", SHOP_WITH_NODES)
    answered = instant(prometheus, with_nodes)
    assert sorted(series.get("namespace", "") for series in answered) == ["", "shop"]


def endpoint(server: PrometheusServer, **overrides: object) -> Endpoint:
    values: dict[str, object] = {
        "kind": "prometheus",
        "name": "main",
        "url": server.url,
        "cluster": None,
        "timeout_s": 10.0,
    }
    values.update(overrides)
    return Endpoint(**values)  # type: ignore[arg-type]


async def test_a_range_is_summarised_per_series_with_at_most_120_points(prometheus):
    http = ObserveHttp()
    client = Prometheus(http, endpoint(prometheus), max_window_h=24, max_series=50)
    try:
        query = scope_promql("container_cpu", SHOP_AND_TEAMS)
        result = await client.range(query, NOW - 29 * 60, NOW)
    finally:
        await http.close()
    assert result.step_s == 15 and result.omitted == 0
    [series] = result.series
    assert series.labels["namespace"] == "shop" and series.points <= 120
    assert (series.minimum, series.minimum_at) == (0.5, pytest.approx(NOW - 29 * 60, abs=15))
    assert series.maximum == pytest.approx(0.79) and series.last == pytest.approx(0.79)
    text = render_range(result)
    assert 'container_cpu{namespace="shop",pod="shop-0"}: min 0.5 at' in text
    assert prometheus.queries()[-1] == 'container_cpu{namespace=~"shop|team\\\\-.*"}'


async def test_prometheus_errors_and_limits_are_sentences(prometheus):
    http = ObserveHttp()
    client = Prometheus(http, endpoint(prometheus), max_window_h=24, max_series=1)
    unreachable = Prometheus(http, endpoint(prometheus, url="http://127.0.0.1:9"), 24, 1)
    try:
        with pytest.raises(ObserveError, match=r"refused the request \(400\): .*parse error"):
            await client.instant("sum(", NOW)
        with pytest.raises(ObserveError, match="at most 24 h may be queried"):
            await client.range("up", NOW - 25 * 3600, NOW)
        with pytest.raises(
            ObserveError, match=r"Prometheus main \(http://127.0.0.1:9\) is unreachable"
        ):
            await unreachable.instant("up", NOW)
        answer = await client.instant("container_cpu", NOW)
    finally:
        await http.close()
    assert len(answer.samples) == 1 and answer.omitted == 1
    assert "1 more series not shown: narrow the query." in render_instant(answer)


def test_the_step_keeps_a_series_under_120_points():
    assert auto_step(0, 3600) == 30
    assert auto_step(0, 24 * 3600) == 900
    assert auto_step(0, 60) == 1
    assert all((hours * 3600) / auto_step(0, hours * 3600) <= 120 for hours in (1, 3, 6, 24, 48))
