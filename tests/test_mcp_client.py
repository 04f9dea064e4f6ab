"""kelpie's MCP client against MCP servers written with the SDK's own server
(tests/peers/mcp_servers.py): over streamable HTTP on 127.0.0.1 and over stdio, one that
answers too slowly, one whose process dies mid-call, one that is not there at first, and a
tool that claims `readOnlyHint` but is configured as a write. What is asserted is what the
peer received (its call log) and what kelpie would hand the pipeline."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from bot.checks import mcp_checks
from bot.config import ConfigError, McpServerConfig, Secrets, parse_config
from bot.pipeline.harness import ToolRegistry
from bot.toolsets.mcp.connection import McpConnection, ServerState
from bot.toolsets.mcp.toolset import McpToolset, model_name
from bot.toolsets.spec import Tool, ToolContext, ToolFailure, ToolKind, ToolResult, ToolScope
from tests.peers.mcp_servers import PLANTED, HttpPeer, PeerLog
from tests.postgres import free_port

GRAFANA_AUTH = "Bearer glsa_test_0123456789abcdef"
STDIO_TOKEN = "stdio-token-0123456789"
READS = ["get_*", "search", "list_pods", "slow", "crash", "failing", "grow", "grown"]


@pytest.fixture(scope="module")
def peer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mcp-peer")


@pytest.fixture(scope="module")
def http_peer(peer_dir: Path) -> Iterator[HttpPeer]:
    peer = HttpPeer(peer_dir / "http.jsonl")
    peer.start()
    yield peer
    peer.stop()


def http_config(url: str, **extra: Any) -> McpServerConfig:
    return McpServerConfig.model_validate(
        {"url": url, "headers": {"Authorization": "GRAFANA_AUTH"}, "read": READS, **extra}
    )


def stdio_config(log: Path, **extra: Any) -> McpServerConfig:
    return McpServerConfig.model_validate(
        {
            "command": sys.executable,
            "args": ["-m", "tests.peers.mcp_servers", "stdio"],
            "env": {"GRAFANA_TOKEN": "KELPIE_STDIO_TOKEN", "MCP_PEER_LOG": "KELPIE_PEER_LOG"},
            "read": READS,
            **extra,
        }
    )


def values_of(config: McpServerConfig, environ: dict[str, str]) -> Callable[[], dict[str, str]]:
    names = config.headers or config.env
    return lambda: {key: environ[env] for key, env in names.items()}


async def connected(
    name: str, config: McpServerConfig, environ: dict[str, str], delays: tuple[float, ...] = (0.0,)
) -> McpConnection:
    connection = McpConnection(name, config, values_of(config, environ), delays=delays)
    await connection.start()
    return connection


async def until(condition: Callable[[], bool]) -> None:
    """Wait for a state the connection's owner task reaches on its own (a hang guard of
    30 s, not a measure)."""
    async with asyncio.timeout(30):
        while not condition():
            await asyncio.sleep(0.01)


CONTEXT = ToolContext("prod", "shop")


def by_name(toolset: McpToolset) -> dict[str, Any]:
    return {tool.name: tool for tool in toolset.tools()}


async def test_http_tools_are_named_kinded_by_config_and_called_with_the_env_header(
    http_peer: HttpPeer,
):
    config = http_config(http_peer.url, read=["get_*", "search"])
    connection = await connected("grafana", config, {"GRAFANA_AUTH": GRAFANA_AUTH})
    try:
        tools = by_name(McpToolset([connection], {"grafana": config}))
        get = tools["mcp_grafana_get_dashboard"]
        assert (get.kind, get.pattern_name) == (ToolKind.READ, "mcp/grafana/get_dashboard")
        assert get.parameters["properties"] == {"uid": {"title": "Uid", "type": "string"}}
        # Claims readOnlyHint; kelpie's config does not list it: a write, the claim shown.
        annotate = tools["mcp_grafana_create_annotation"]
        assert annotate.kind is ToolKind.WRITE and annotate.write is not None
        assert "the server says: read-only" in annotate.description
        assert "reason" in annotate.parameters["required"]
        # A tool with a namespace argument is judged as landing there; others are not.
        assert tools["mcp_grafana_list_pods"].scope is ToolScope.NAMESPACED
        assert get.scope is ToolScope.QUERY

        result = await get.handler({"uid": "abc"}, CONTEXT)
        assert f"dashboard abc: 3 panels, datasource key {PLANTED}" in result.text
        # The header's value came from the variable the config named, whole.
        assert http_peer.log.calls("get_dashboard")[-1] == {
            "tool": "get_dashboard",
            "args": {"uid": "abc"},
            "seen": GRAFANA_AUTH,
        }
    finally:
        await connection.close()


async def test_a_write_is_prepared_into_the_exact_call_and_runs_only_when_executed(
    http_peer: HttpPeer,
):
    config = http_config(http_peer.url, read=["get_*"])
    connection = await connected("grafana", config, {"GRAFANA_AUTH": GRAFANA_AUTH})
    try:
        annotate = by_name(McpToolset([connection], {"grafana": config}))[
            "mcp_grafana_create_annotation"
        ]
        assert annotate.write is not None
        args = {"dashboard": "checkout", "text": "deploy 42"}
        plan = await annotate.write.prepare(args, CONTEXT)
        assert [change.render() for change in plan.changes] == [
            'arguments (none) → {"dashboard": "checkout", "text": "deploy 42"}'
        ]
        assert "readOnlyHint" in plan.notes[0]
        assert http_peer.log.calls("create_annotation") == []
        await annotate.write.execute(plan, CONTEXT)
        assert http_peer.log.calls("create_annotation")[-1]["args"] == args
    finally:
        await connection.close()


async def test_stdio_server_gets_its_variables_and_its_stderr_is_logged_masked(
    peer_dir: Path, caplog: pytest.LogCaptureFixture
):
    caplog.set_level(logging.INFO, logger="bot.toolsets.mcp.connection")
    log = peer_dir / "stdio.jsonl"
    config = stdio_config(log)
    environ = {"KELPIE_STDIO_TOKEN": STDIO_TOKEN, "KELPIE_PEER_LOG": str(log)}
    connection = await connected("local", config, environ)
    try:
        get = by_name(McpToolset([connection], {"local": config}))["mcp_local_get_dashboard"]
        await get.handler({"uid": "x"}, CONTEXT)
        assert PeerLog(log).calls("get_dashboard")[-1]["seen"] == STDIO_TOKEN
        # The server's own stderr line reaches kelpie's log, its secret masked.
        await until(lambda: "MCP server local: debug: fetched x with key" in caplog.text)
        assert PLANTED not in caplog.text
    finally:
        await connection.close()


async def test_a_slow_tool_gives_one_sentence_and_the_server_stays_usable(http_peer: HttpPeer):
    config = http_config(http_peer.url, timeout_s=1)
    connection = await connected("grafana", config, {"GRAFANA_AUTH": GRAFANA_AUTH})
    try:
        tools = by_name(McpToolset([connection], {"grafana": config}))
        with pytest.raises(ToolFailure) as failure:
            await tools["mcp_grafana_slow"].handler({}, CONTEXT)
        assert str(failure.value) == "MCP server grafana did not answer slow within 1 s"
        result = await tools["mcp_grafana_search"].handler({"query": "cpu"}, CONTEXT)
        assert result.text == "found 1 dashboard for cpu"
    finally:
        await connection.close()


async def test_a_server_that_dies_mid_call_is_reconnected(peer_dir: Path):
    log = peer_dir / "crash.jsonl"
    environ = {"KELPIE_STDIO_TOKEN": STDIO_TOKEN, "KELPIE_PEER_LOG": str(log)}
    config = stdio_config(log)
    connection = await connected("local", config, environ)
    toolset = McpToolset([connection], {"local": config})
    try:
        with pytest.raises(ToolFailure) as failure:
            await by_name(toolset)["mcp_local_crash"].handler({}, CONTEXT)
        assert str(failure.value) == "MCP server local dropped the connection during crash"
        # A new process is started; its tools are offered again and answer.
        await until(lambda: connection.state is ServerState.UP and bool(connection.tools))
        await by_name(toolset)["mcp_local_search"].handler({"query": "after"}, CONTEXT)
        assert PeerLog(log).calls("search")[-1]["args"] == {"query": "after"}
    finally:
        await connection.close()


async def test_a_server_down_at_start_is_left_out_and_picked_up_once_it_answers(
    peer_dir: Path,
):
    peer = HttpPeer(peer_dir / "late.jsonl")
    config = http_config(peer.url)
    connection = await connected("late", config, {"GRAFANA_AUTH": GRAFANA_AUTH}, delays=(0.05,))
    toolset = McpToolset([connection], {"late": config})
    try:
        assert connection.state is ServerState.DOWN
        assert connection.problem == "MCP server late is unreachable (ConnectError)"
        assert toolset.tools() == []
        with pytest.raises(ToolFailure, match="MCP server late is unreachable"):
            await connection.call("search", {"query": "x"})
        peer.start()
        await until(lambda: connection.state is ServerState.UP)
        assert "mcp_late_search" in by_name(toolset)
    finally:
        await connection.close()
        peer.stop()


async def test_a_changed_tool_list_is_picked_up(peer_dir: Path):
    log = peer_dir / "grow.jsonl"
    environ = {"KELPIE_STDIO_TOKEN": STDIO_TOKEN, "KELPIE_PEER_LOG": str(log)}
    config = stdio_config(log)
    connection = await connected("local", config, environ)
    toolset = McpToolset([connection], {"local": config})
    try:
        assert "mcp_local_grown" not in by_name(toolset)
        await by_name(toolset)["mcp_local_grow"].handler({}, CONTEXT)
        # The server's list-changed event, not a timer, brings the new tool in.
        await until(lambda: "mcp_local_grown" in by_name(toolset))
        result = await by_name(toolset)["mcp_local_grown"].handler({}, CONTEXT)
        assert result.text == "I am new"
    finally:
        await connection.close()


async def test_a_tools_error_and_an_undeclared_argument_are_one_sentence(http_peer: HttpPeer):
    config = http_config(http_peer.url)
    connection = await connected("grafana", config, {"GRAFANA_AUTH": GRAFANA_AUTH})
    try:
        tools = by_name(McpToolset([connection], {"grafana": config}))
        with pytest.raises(ToolFailure) as failure:
            await tools["mcp_grafana_failing"].handler({}, CONTEXT)
        assert str(failure.value) == (
            "MCP tool grafana/failing answered an error: Error executing tool failing"
        )
        # A tool without a namespace argument is given none (the pipeline did not judge one).
        before = len(http_peer.log.calls("search"))
        with pytest.raises(ValueError, match="unknown argument"):
            await tools["mcp_grafana_search"].handler(
                {"query": "x", "namespace": "kube-system"}, CONTEXT
            )
        assert len(http_peer.log.calls("search")) == before
        # Where a namespaced tool lands: its argument, else the channel's default.
        pods = tools["mcp_grafana_list_pods"]
        assert pods.target_namespace({"namespace": "dev"}, CONTEXT) == "dev"
        assert pods.target_namespace({}, CONTEXT) == "shop"
        assert pods.target_namespace({"namespace": "*"}, CONTEXT) is None
        assert pods.target_namespace({"namespace": ""}, CONTEXT) is None
        assert pods.target_namespace({"namespace": ["a", "b"]}, CONTEXT) is None
        # Named by none, the call carries the namespace the pipeline judged.
        await pods.handler({}, CONTEXT)
        assert http_peer.log.calls("list_pods")[-1]["args"] == {"namespace": "shop"}
    finally:
        await connection.close()


async def test_structured_content_reaches_the_model_once(http_peer: HttpPeer):
    config = http_config(http_peer.url)
    connection = await connected("grafana", config, {"GRAFANA_AUTH": GRAFANA_AUTH})
    try:
        latency = by_name(McpToolset([connection], {"grafana": config}))["mcp_grafana_get_latency"]
        result = await latency.handler({"service": "checkout"}, CONTEXT)
        assert json.loads(result.text) == {"service": "checkout", "p95_ms": 120}
    finally:
        await connection.close()


def test_model_names_follow_the_models_rules_and_stay_stable():
    assert model_name("grafana", "search") == "mcp_grafana_search"
    odd = model_name("grafana", "dash.board/get")
    assert odd.startswith("mcp_grafana_dash_board_get_") and len(odd) <= 64
    long = model_name("grafana", "x" * 80)
    assert len(long) == 64 and long == model_name("grafana", "x" * 80)
    assert model_name("grafana", "x" * 80) != model_name("grafana", "x" * 81)


BASE = {
    "kubernetes": {"clusters": [{"name": "prod", "in_cluster": True}]},
    "models": {"active": "m", "profiles": {"m": {"model": "openai/x"}}},
}


def test_config_refuses_literal_secrets_and_unknown_servers_in_roles():
    base = BASE
    with pytest.raises(ConfigError) as literal:
        parse_config(
            base
            | {"mcp": {"servers": {"g": {"url": "http://g/mcp", "headers": {"A": "Bearer x"}}}}}
        )
    assert "is not an environment variable name" in str(literal.value)
    with pytest.raises(ConfigError) as unknown:
        parse_config(
            base
            | {
                "mcp": {"servers": {"grafana": {"url": "http://g/mcp"}}},
                "roles": {"r": {"tools": ["mcp/grafna/*"]}},
            }
        )
    assert 'roles.r.tools[0]: "mcp/grafna/*" names no MCP server (grafana)' in str(unknown.value)
    config = parse_config(
        base
        | {
            "mcp": {"servers": {"grafana": {"url": "http://g/mcp", "headers": {"A": "G_AUTH"}}}},
            "roles": {"r": {"tools": ["mcp/grafana/get_*"]}},
        }
    )
    assert Secrets(config, {}).check_all()[-1] == (
        "mcp.servers.grafana.headers.A: environment variable G_AUTH is not set"
    )


async def test_kelpie_check_has_one_line_per_server(http_peer: HttpPeer):
    auth = {"Authorization": "GRAFANA_AUTH"}
    servers = {
        "grafana": {"url": http_peer.url, "headers": auth, "read": READS},
        "down": {"url": f"http://127.0.0.1:{free_port()}/mcp", "timeout_s": 5},
        "nokey": {"url": http_peer.url, "headers": {"Authorization": "KELPIE_UNSET"}},
    }
    config = parse_config(BASE | {"mcp": {"servers": servers}})
    results = await mcp_checks(config, Secrets(config, {"GRAFANA_AUTH": GRAFANA_AUTH}))
    assert [result.line() for result in results] == [
        f"ok   mcp server grafana: reachable at {http_peer.url}: 9 tools (8 read, 1 write)",
        "FAIL mcp server down: MCP server down is unreachable (ConnectError); "
        "fix mcp.servers.down (url or command, headers or env)",
        "FAIL mcp server nokey: MCP server nokey cannot be used: "
        "mcp.servers.nokey.headers.Authorization: environment variable KELPIE_UNSET is not set; "
        "fix mcp.servers.nokey (url or command, headers or env)",
    ]


def test_the_readme_and_example_config_show_mcp_servers_that_parse():
    root = Path(__file__).resolve().parents[1]
    readme = (root / "README.md").read_text()
    section = readme[readme.index("## Other MCP servers' tools (MCP client)") :]
    snippet = yaml.safe_load(section.split("```yaml\n")[1].split("```")[0])
    config = parse_config(BASE | snippet)
    assert config.mcp.servers["kube"].env == {"KUBECONFIG": "KELPIE_MCP_KUBECONFIG"}
    example = (root / "config" / "kelpie.example.yaml").read_text()
    commented = example[example.index("# mcp:\n#   servers") :].splitlines()
    block = "\n".join(line[2:] for line in commented if line.startswith("#"))
    assert set(parse_config(BASE | yaml.safe_load(block)).mcp.servers) == {"grafana", "kube"}


class Source:
    """Tools that come and go, as a connected MCP server's do."""

    def __init__(self) -> None:
        self.now: list[Tool] = []

    def tools(self) -> list[Tool]:
        return self.now


def test_the_registry_offers_a_sources_tools_as_they_are_now_never_over_its_own():
    async def handler(args: dict[str, Any], context: ToolContext) -> ToolResult:
        return ToolResult("", "")

    own = Tool("list_pods", ToolKind.READ, "Pods.", {}, handler)
    source = Source()
    registry = ToolRegistry([own], [source])
    assert [tool.name for tool in registry.all()] == ["list_pods"]
    came = Tool("mcp_g_x", ToolKind.READ, "X.", {}, handler, pattern="mcp/g/x")
    source.now = [came, Tool("list_pods", ToolKind.WRITE, "Other.", {}, handler)]
    assert registry.get("mcp_g_x") is came and registry.get("list_pods") is own
    assert [tool.pattern_name for tool in registry.all()] == ["read/list_pods", "mcp/g/x"]
    source.now = []
    assert registry.get("mcp_g_x") is None


def test_a_kelpie_without_mcp_config_never_imports_the_sdk(tmp_path: Path) -> None:
    """The SDK with uvicorn and starlette is ~30 MB resident: `kelpie run`'s start (the
    composition root and the startup checks, config without `mcp`) must not load it."""
    import subprocess

    script = (
        "import sys\n"
        "import bot.app, bot.checks, bot.cli\n"
        "from bot.app import mcp_servers\n"
        "from bot.config import Secrets, parse_config\n"
        "config = parse_config({'kubernetes': {'clusters': [{'name': 'prod', "
        "'kubeconfig': '/nonexistent'}]}, 'models': {'profiles': {'default': "
        "{'model': 'openai/x', 'auth': {'method': 'none'}}}}})\n"
        "print(mcp_servers(config, Secrets(config, {})).tools())\n"
        "heavy = ('mcp', 'mcp_types', 'uvicorn', 'starlette')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))\n"
    )
    repo = Path(__file__).resolve().parents[1]
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(repo), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[]", "[]"]
