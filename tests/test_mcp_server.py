"""kelpie's MCP server driven by the SDK's own client: over streamable HTTP (inside the
running bot) and over stdio (`kelpie mcp serve --stdio` as a subprocess). Two tokens, two
roles; a read masked; a write that waits for a permitted click in the fake Slack; a denied
tool; no token and a wrong token. The fake cluster's request log proves what ran."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
import pytest_asyncio
import yaml
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from bot.app import Kelpie
from bot.checks import mcp_server_checks
from bot.config import ConfigError, Secrets, parse_config
from bot.mcp.server_access import McpCallers
from bot.store.repositories import ToolAuditRepository
from tests.test_approvals import card_text, has_buttons
from tests.world import (
    BOB,
    CAROL,
    DAVE,
    MCP_TOKENS,
    RANDOM_CHANNEL,
    World,
    environ,
    merge,
    running_world,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")

IDE_TOKEN = MCP_TOKENS["KELPIE_TEST_MCP_IDE"]
OPS_TOKEN = MCP_TOKENS["KELPIE_TEST_MCP_OPS"]
PLANTED = "hunter2-Planted-Db-Secret-77"
REPO = Path(__file__).resolve().parents[1]
# The ops client's approval channel: kelpie is not enabled there for people (no channel
# mapping); it needs none to show the client's cards and take their clicks.
APPROVALS = RANDOM_CHANNEL

MCP_CONFIG: dict[str, Any] = {
    "server": {"mcp": {"host": "127.0.0.1", "port": 0}},
    "roles": {
        "pods-reader": {"tools": ["read/list_pods", "read/pod_logs"], "namespaces": ["shop"]}
    },
    "mcp": {
        "clients": [
            {"name": "ide", "token_env": "KELPIE_TEST_MCP_IDE", "role": "pods-reader"},
            {
                "name": "ops-bot",
                "token_env": "KELPIE_TEST_MCP_OPS",
                "role": "operator",  # writes in shop, approved by CAROL or the SRE group
                "approval_channel": APPROVALS,
            },
        ]
    },
}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def served(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[World, Kelpie]]:
    async with running_world(tmp_path_factory.mktemp("mcp")) as world:
        bot = await world.start_bot(MCP_CONFIG)
        yield world, bot


@asynccontextmanager
async def connected(bot: Kelpie, token: str | None, mode: str = "auto") -> AsyncIterator[Client]:
    """The SDK's client over streamable HTTP; `mode="legacy"`: the initialize handshake of
    clients from before the 2026-07-28 protocol."""
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    url = f"http://127.0.0.1:{bot.mcp_port}/mcp"
    async with httpx2.AsyncClient(headers=headers) as http:
        async with Client(streamable_http_client(url, http_client=http), mode=mode) as client:
            yield client


def real_writes(world: World) -> list[Any]:
    return [w for w in world.kube.writes() if w.query.get("dryRun") != "All"]


def pod_in_shop(world: World) -> str:
    pods = [p for p in world.kube.objects("Pod") if p["metadata"]["namespace"] == "shop"]
    return str(pods[0]["metadata"]["name"])


async def test_each_token_lists_its_own_roles_tools(served: tuple[World, Kelpie]) -> None:
    _world, bot = served
    async with connected(bot, IDE_TOKEN) as ide:
        ide_tools = {tool.name: tool for tool in (await ide.list_tools()).tools}
    async with connected(bot, OPS_TOKEN) as ops:
        ops_tools = {tool.name: tool for tool in (await ops.list_tools()).tools}
    assert set(ide_tools) == {"list_pods", "pod_logs", "kelpie_approval_status"}
    assert {"scale_deployment", "list_pods", "describe_pod", "kelpie_approval_status"} <= set(
        ops_tools
    )
    # The present tools post into a Slack thread: an MCP caller has none.
    assert not any(name.startswith("present_") for name in ops_tools)
    # The input schema is kelpie's declaration of the tool.
    declared = bot.core.registry.get("pod_logs")
    assert declared is not None
    assert ide_tools["pod_logs"].input_schema == declared.parameters
    scale = ops_tools["scale_deployment"].annotations
    assert scale is not None and scale.read_only_hint is False
    # A client speaking the older handshake sees the same.
    async with connected(bot, IDE_TOKEN, mode="legacy") as legacy:
        assert {tool.name for tool in (await legacy.list_tools()).tools} == set(ide_tools)
        listed = await legacy.call_tool("list_pods", {"namespace": "shop"})
    assert not listed.is_error and "checkout-api" in listed.content[0].text  # type: ignore[union-attr]


async def test_a_read_is_masked_and_its_audit_names_the_client(
    served: tuple[World, Kelpie],
) -> None:
    world, bot = served
    pod = pod_in_shop(world)
    world.kube.set_logs("shop", pod, f"starting\nDB_PASSWORD={PLANTED}\nready\n")
    async with connected(bot, IDE_TOKEN) as ide:
        result = await ide.call_tool("pod_logs", {"namespace": "shop", "name": pod})
    text = result.content[0].text  # type: ignore[union-attr]
    assert not result.is_error and "ready" in text
    assert PLANTED not in text and "[MASKED]" in text
    assert result.structured_content is not None
    assert PLANTED not in str(result.structured_content)
    assert result.structured_content["status"] == "ok"
    session = await bot.core.sessions.find("mcp:ide:")
    assert session is not None
    audits = await ToolAuditRepository(bot.db).for_session(session.id)
    assert audits and {a.slack_user for a in audits} == {"mcp-ide"}
    assert [a.decision for a in audits if a.tool == "read/pod_logs"][-1] == "ok"


async def test_a_tool_outside_the_role_is_an_mcp_error_and_nothing_runs(
    served: tuple[World, Kelpie],
) -> None:
    world, bot = served
    before = len(world.kube.writes())
    async with connected(bot, IDE_TOKEN) as ide:
        with pytest.raises(MCPError, match="may not run write/scale_deployment"):
            await ide.call_tool(
                "scale_deployment", {"namespace": "shop", "name": "checkout-api", "replicas": 9}
            )
        with pytest.raises(MCPError, match="Unknown tool"):
            await ide.call_tool("no_such_tool", {})
        # In the role, but outside its namespaces: the role gate refuses it too.
        with pytest.raises(MCPError, match="may not touch namespace kube-system"):
            await ide.call_tool("list_pods", {"namespace": "kube-system"})
    assert len(world.kube.writes()) == before  # not even a dry run
    # Each refusal is on record, naming the client.
    session = await bot.core.sessions.find("mcp:ide:")
    assert session is not None
    audits = await ToolAuditRepository(bot.db).for_session(session.id)
    refused = {(a.tool, a.decision, a.slack_user) for a in audits}
    assert ("write/scale_deployment", "deny", "mcp-ide") in refused
    assert ("no_such_tool", "failed", "mcp-ide") in refused
    assert ("read/list_pods", "deny", "mcp-ide") in refused
    counted = bot.metrics.render().decode()
    assert 'kelpie_mcp_calls_total{client="ide",outcome="denied"} 2.0' in counted
    assert 'kelpie_mcp_calls_total{client="ide",outcome="unknown"} 1.0' in counted


@pytest.mark.parametrize("token", [None, "not-a-configured-token"])
async def test_no_token_or_a_wrong_token_is_an_mcp_error(
    served: tuple[World, Kelpie], token: str | None
) -> None:
    world, bot = served
    reads = len(world.kube.requests)
    refused: list[str] = []
    try:
        async with connected(bot, token) as client:
            await client.call_tool("list_pods", {"namespace": "shop"})
    except* MCPError as group:  # raised from the client's task group
        refused = [str(error) for error in leaves(group)]
    said = "belongs to no configured MCP client" if token else "send the client's token"
    assert refused and all(said in message for message in refused)
    assert len(world.kube.requests) == reads
    assert (
        'kelpie_mcp_calls_total{client="",outcome="unauthorized"}' in bot.metrics.render().decode()
    )


def leaves(group: BaseExceptionGroup[MCPError]) -> list[MCPError]:
    found: list[MCPError] = []
    for error in group.exceptions:
        found += leaves(error) if isinstance(error, BaseExceptionGroup) else [error]
    return found


async def card_of(world: World, approval_id: str) -> Any:
    """The approval's card: a top-level message of the client's approval channel."""

    def find(server: Any) -> Any:
        for message in server.channel_messages(APPROVALS):
            blocks = message.blocks or []
            if message.is_bot and any(
                b.get("block_id") == f"approval:{approval_id}" for b in blocks
            ):
                return message
        return None

    return await world.slack.wait_for(find, timeout=20)


async def click(world: World, user: str, card: Any, approval_id: str) -> None:
    payload = world.slack.block_action(user, APPROVALS, card.ts, "kelpie_approve", approval_id)
    await world.slack.deliver("interactive", payload)


async def whispered(world: World, user: str, count: int) -> list[str]:
    """The ephemeral messages `user` got, once there are `count` of them."""

    def found(server: Any) -> list[str] | None:
        texts = [
            str(c.params.get("text"))
            for c in server.calls_to("chat.postEphemeral")
            if c.params.get("user") == user
        ]
        return texts if len(texts) >= count else None

    result: list[str] = await world.slack.wait_for(found, timeout=20)
    return result


async def status_of(client: Client, approval_id: str) -> dict[str, Any]:
    result = await client.call_tool("kelpie_approval_status", {"approval_id": approval_id})
    assert result.structured_content is not None
    return result.structured_content


async def test_a_write_runs_once_only_after_a_permitted_click(
    served: tuple[World, Kelpie],
) -> None:
    world, bot = served
    async with connected(bot, OPS_TOKEN) as ops:
        result = await ops.call_tool(
            "scale_deployment",
            {"namespace": "shop", "name": "checkout-api", "replicas": 5, "reason": "load test"},
        )
        assert result.structured_content is not None and not result.is_error
        approval_id = result.structured_content["approval_id"]
        text = result.content[0].text  # type: ignore[union-attr]
        assert text.startswith(f"pending approval {approval_id}")
        assert "spec.replicas 3 → 5" in result.structured_content["preview"]
        assert real_writes(world) == []  # a dry run only

        card = await card_of(world, approval_id)
        assert "the MCP client ops-bot" in card_text(card) and "load test" in card_text(card)
        assert (await status_of(ops, approval_id))["status"] == "pending"

        # BOB is no approver of the client's role: told so, nothing runs.
        await click(world, BOB, card, approval_id)
        assert "You may not decide this change" in (await whispered(world, BOB, 1))[0]
        told = [
            c for c in world.slack.calls_to("chat.postEphemeral") if c.params.get("user") == BOB
        ]
        assert not told[-1].params.get("thread_ts")  # the card is top-level: no thread
        assert real_writes(world) == []
        assert (await status_of(ops, approval_id))["status"] == "pending"

        await click(world, CAROL, card, approval_id)

        def decided(server: Any) -> Any:
            now = server.get_message(APPROVALS, card.ts)
            return now if now is not None and "Outcome" in card_text(now) else None

        shown = await world.slack.wait_for(decided, timeout=20)
        assert not has_buttons(shown) and f"Approved by <@{CAROL}>" in card_text(shown)
        status = await status_of(ops, approval_id)
        assert status["status"] == "approved" and status["decided_by"] == CAROL
        assert status["outcome"] == "scaled shop/checkout-api to 5 replicas"

        # A second click decides nothing: the write ran once.
        await click(world, CAROL, card, approval_id)
        assert "already" in (await whispered(world, CAROL, 1))[0]
    writes = real_writes(world)
    assert len(writes) == 1 and writes[0].body["spec"] == {"replicas": 5}
    # Nobody's conversation asked for it: no agent turn, no model request.
    assert world.model.requests == []


async def test_a_rejected_write_never_runs_and_its_status_says_who_rejected_it(
    served: tuple[World, Kelpie],
) -> None:
    world, bot = served
    writes = len(real_writes(world))
    async with connected(bot, OPS_TOKEN) as ops:
        result = await ops.call_tool(
            "scale_deployment", {"namespace": "shop", "name": "checkout-api", "replicas": 8}
        )
        assert result.structured_content is not None
        approval_id = result.structured_content["approval_id"]
        card = await card_of(world, approval_id)
        # DAVE approves through the SRE user group: he may reject too.
        payload = world.slack.block_action(DAVE, APPROVALS, card.ts, "kelpie_reject", approval_id)
        await world.slack.deliver("interactive", payload)

        def rejected(server: Any) -> Any:
            now = server.get_message(APPROVALS, card.ts)
            return now if now is not None and "Rejected" in card_text(now) else None

        await world.slack.wait_for(rejected, timeout=20)
        status = await status_of(ops, approval_id)
    assert status["status"] == "rejected" and status["decided_by"] == DAVE
    assert len(real_writes(world)) == writes


async def test_a_status_of_another_clients_approval_is_unknown(
    served: tuple[World, Kelpie],
) -> None:
    _world, bot = served
    async with connected(bot, IDE_TOKEN) as ide:
        with pytest.raises(MCPError, match="No approval"):
            await ide.call_tool("kelpie_approval_status", {"approval_id": "0" * 32})


@asynccontextmanager
async def stdio(world: World, tmp: Path, token: str) -> AsyncIterator[Client]:
    config = tmp / "kelpie.yaml"
    config.write_text(yaml.safe_dump(world.config_data))
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "PYTHONPATH": str(REPO),
        "KELPIE_MCP_TOKEN": token,
        **environ(world.slack),
    }
    command = ["-m", "bot.cli", "mcp", "serve", "--stdio", "--config", str(config)]
    server = StdioServerParameters(command=sys.executable, args=command, env=env, cwd=str(tmp))
    async with Client(server) as client:
        yield client


async def test_kelpie_mcp_serve_stdio_serves_the_tokens_role(
    served: tuple[World, Kelpie], tmp_path: Path
) -> None:
    world, _bot = served
    pod = pod_in_shop(world)
    world.kube.set_logs("shop", pod, f"DB_PASSWORD={PLANTED}\nready\n")
    async with stdio(world, tmp_path, IDE_TOKEN) as ide:
        names = {tool.name for tool in (await ide.list_tools()).tools}
        result = await ide.call_tool("pod_logs", {"namespace": "shop", "name": pod})
        with pytest.raises(MCPError, match="may not run write/scale_deployment"):
            await ide.call_tool(
                "scale_deployment", {"namespace": "shop", "name": "checkout-api", "replicas": 7}
            )
    assert names == {"list_pods", "pod_logs", "kelpie_approval_status"}
    text = result.content[0].text  # type: ignore[union-attr]
    assert "ready" in text and PLANTED not in text and "[MASKED]" in text


async def test_a_write_through_stdio_is_decided_by_the_running_bot(
    served: tuple[World, Kelpie], tmp_path: Path
) -> None:
    """`kelpie mcp serve --stdio` posts the card; the click reaches the running bot (on the
    same database), which runs the write; the stdio caller reads the outcome."""
    world, _bot = served
    writes = len(real_writes(world))
    async with stdio(world, tmp_path, OPS_TOKEN) as ops:
        result = await ops.call_tool(
            "scale_deployment",
            {"namespace": "shop", "name": "checkout-api", "replicas": 4, "reason": "from stdio"},
        )
        assert result.structured_content is not None
        approval_id = result.structured_content["approval_id"]
        card = await card_of(world, approval_id)
        assert len(real_writes(world)) == writes
        await click(world, CAROL, card, approval_id)

        def decided(server: Any) -> Any:
            now = server.get_message(APPROVALS, card.ts)
            return now if now is not None and "Outcome" in card_text(now) else None

        await world.slack.wait_for(decided, timeout=20)
        status = await status_of(ops, approval_id)
    assert status["status"] == "approved"
    assert status["outcome"] == "scaled shop/checkout-api to 4 replicas"
    assert len(real_writes(world)) == writes + 1


async def test_kelpie_mcp_serve_stdio_refuses_a_wrong_token(
    served: tuple[World, Kelpie], tmp_path: Path
) -> None:
    world, _bot = served
    reads = len(world.kube.requests)
    async with stdio(world, tmp_path, "not-a-configured-token") as client:
        with pytest.raises(MCPError, match="Unauthorized"):
            await client.list_tools()
        with pytest.raises(MCPError, match="Unauthorized"):
            await client.call_tool("list_pods", {"namespace": "shop"})
    assert len(world.kube.requests) == reads


async def test_kelpie_check_names_each_client_and_config_names_a_wrong_reference(
    served: tuple[World, Kelpie],
) -> None:
    world, _bot = served
    config = world.config
    lines = [r.line() for r in mcp_server_checks(config, Secrets(config, environ(world.slack)))]
    assert lines == [
        "ok   mcp server: streamable HTTP at 127.0.0.1:0/mcp, 2 client(s)",
        "ok   mcp client ide: token set, role pods-reader on cluster prod, "
        "writes not offered (no approval_channel)",
        f"ok   mcp client ops-bot: token set, role operator on cluster prod, "
        f"writes approved in {APPROVALS}",
    ]
    unset = [r.line() for r in mcp_server_checks(config, Secrets(config, {}))][1]
    assert unset == (
        "FAIL mcp client ide: mcp.clients[0].token_env: "
        "environment variable KELPIE_TEST_MCP_IDE is not set"
    )
    no_clients = parse_config({**world.config_data, "mcp": {"clients": []}})
    assert [r.line() for r in mcp_server_checks(no_clients, Secrets(no_clients, {}))] == [
        "FAIL mcp server: no mcp.clients: every call would be refused"
    ]
    shared = {**environ(world.slack), "KELPIE_TEST_MCP_OPS": IDE_TOKEN}
    with pytest.raises(ConfigError, match="hold the same token"):
        McpCallers.from_config(config, Secrets(config, shared))
    wrong = {"name": "x", "token_env": "KELPIE_TEST_MCP_IDE", "role": "root", "cluster": "qa"}
    with pytest.raises(ConfigError) as raised:
        parse_config({**world.config_data, "mcp": {"clients": [wrong]}})
    assert raised.value.problems == [
        'mcp.clients[0].role: unknown role "root" (viewer, operator, admin, pods-reader)',
        'mcp.clients[0].cluster: unknown cluster "qa" (prod)',
    ]


async def test_the_readme_and_example_config_show_mcp_config_that_parses(
    served: tuple[World, Kelpie],
) -> None:
    world, _bot = served
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("## Other agents use kelpie's tools over MCP") :]
    snippet = yaml.safe_load(section.split("```yaml\n")[1].split("```")[0])
    assert parse_config(merge(world.config_data, snippet)).mcp.clients[1].name == "slackbot"
    example = (REPO / "config" / "kelpie.example.yaml").read_text()
    commented = example[example.index("# mcp:\n#   clients") :].split("\n\n")[0]
    block = yaml.safe_load("\n".join(line[2:] for line in commented.splitlines()))
    parsed = parse_config(merge(world.config_data, block))
    assert [client.name for client in parsed.mcp.clients] == ["ide", "slackbot"]
    assert parsed.mcp.clients[1].approval_channel == "C0123OPS"
