"""The same three-round investigation on each wire format LiteLLM speaks for kelpie:
OpenAI-compatible, Anthropic (extended thinking on), Gemini and Ollama (`ollama_chat/`), and
on the OpenAI wire through kelpie's own client (`client: openai-compatible`).

Each peer refuses what its provider refuses (a tool-use turn sent back without its signed
thinking, an empty text part beside function calls, tool-call arguments as a string…), so a
request kelpie shapes wrongly fails the turn here as it would in production. The
investigation runs in Slack (the whole bot on the Slack, model and Kubernetes peers) and in
`kelpie chat` (the CLI on a pseudo-terminal)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from sqlmodel import col, select

from bot.app import model_gateway
from bot.config import Secrets, parse_config
from bot.model.types import ModelRequest, ThinkingBlock
from bot.store.tables import MessageRow, PayloadRow, UsageRow
from tests.peers.kube_server import KubeServer
from tests.peers.model_server import ModelServer, ScriptedPeer
from tests.peers.provider_servers import (
    AnthropicServer,
    GeminiServer,
    OllamaServer,
    sign_thinking,
)
from tests.peers.slack_server import SlackServer
from tests.secrets_corpus import SECRETS
from tests.test_approvals import click, wait_card
from tests.test_chat import REPO, Terminal
from tests.world import (
    ALICE,
    CAROL,
    MODEL_KEY,
    OPS_CHANNEL,
    SHOP_CHANNEL,
    base_config,
    running_world,
)

ANSWER = "checkout-api runs out of memory: its pods are OOMKilled, raise the limit."
QUESTION = "why is checkout-api crashlooping?"
ROUNDS = [
    ("list_pods", {"namespace": "shop"}, "I should look at the pods first."),
    ("list_deployments", {"namespace": "shop"}, "Now the deployment's replicas."),
    ("list_events", {"namespace": "shop"}, "The events will say why they restart."),
]
THOUGHT = "The events show OOMKilled."
MESSAGES = [{"role": "user", "content": QUESTION}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "list_pods",
            "description": "List the pods of a namespace.",
            "parameters": {
                "type": "object",
                "properties": {"namespace": {"type": "string"}},
                "required": ["namespace"],
            },
        },
    }
]


async def _ignore(_: str) -> None:
    return None


@dataclass(frozen=True)
class Provider:
    name: str
    peer: Callable[[], ScriptedPeer]
    model: str
    auth: dict[str, Any]
    agent: dict[str, Any] = field(default_factory=dict)
    client: str = "litellm"

    def profile(self, peer: ScriptedPeer) -> dict[str, Any]:
        return {
            "model": self.model,
            "api_base": peer.api_base,
            "auth": self.auth,
            "client": self.client,
        }


KEYED = {"method": "environment", "env": "KELPIE_TEST_MODEL_KEY"}
PROVIDERS = [
    Provider("openai", ModelServer, "openai/test-model", KEYED),
    # The same wire without LiteLLM: kelpie's own client.
    Provider(
        "openai-compatible", ModelServer, "openai/test-model", KEYED, client="openai-compatible"
    ),
    Provider(
        "anthropic",
        lambda: AnthropicServer(model="claude-sonnet-4-20250514", api_key=MODEL_KEY),
        "anthropic/claude-sonnet-4-20250514",
        KEYED,
        # Extended thinking on: every round after the first must send back signed thinking.
        {"thinking": "low"},
    ),
    Provider(
        "gemini",
        lambda: GeminiServer(model="gemini-test", api_key=MODEL_KEY),
        "gemini/gemini-test",
        KEYED,
    ),
    Provider(
        "ollama",
        lambda: OllamaServer(model="qwen3:8b"),
        "ollama_chat/qwen3:8b",
        {"method": "none", "env": None},
    ),
]


def script_investigation(peer: ScriptedPeer) -> None:
    for name, args, thought in ROUNDS:
        peer.reply_tool_calls([(name, args)], reasoning=thought)
    peer.reply_text(ANSWER, reasoning=THOUGHT)


def check_wire(provider: Provider, peer: ScriptedPeer) -> None:
    """What went over the wire, in the provider's own shape."""
    peer.assert_script_consumed()  # also: no request was refused
    assert len(peer.requests) == 4
    last = peer.requests[-1]
    if provider.name == "anthropic":
        assert last["thinking"]["type"] == "enabled" and "temperature" not in last
        turns = [m for m in last["messages"] if m["role"] == "assistant"]
        assert [t["content"][0] for t in turns] == [
            {"type": "thinking", "thinking": thought, "signature": sign_thinking(thought)}
            for _, _, thought in ROUNDS
        ]
    elif provider.name == "gemini":
        calls = [c for c in last["contents"] if c["role"] == "model"]
        assert len(calls) == 3 and all("text" not in p for c in calls for p in c["parts"])
    elif provider.name == "ollama":
        calls = [m["tool_calls"] for m in last["messages"] if m.get("tool_calls")]
        assert [c[0]["function"]["arguments"] for c in calls] == [a for _, a, _ in ROUNDS]
        # `auth: none`: no credential header of any kind reached the server.
        credential = {"authorization", "x-api-key", "x-goog-api-key", "api-key"}
        assert all(not credential & {name.lower() for name in h} for h in peer.headers)
    else:
        assert [m.get("content") for m in last["messages"] if m.get("tool_calls")] == [None] * 3


def check_cluster(kube: KubeServer) -> None:
    reads = [r.path for r in kube.requests if r.method == "GET"]
    for suffix in (
        "/namespaces/shop/pods",
        "/namespaces/shop/deployments",
        "/namespaces/shop/events",
    ):
        assert any(path.endswith(suffix) for path in reads), reads


@pytest.mark.parametrize("provider", PROVIDERS, ids=[p.name for p in PROVIDERS])
async def test_three_round_investigation_in_slack(provider: Provider, tmp_path: Path) -> None:
    peer = provider.peer()
    async with running_world(tmp_path, peer) as world:
        script_investigation(peer)
        await world.start_bot(
            {
                "models": {"profiles": {"default": provider.profile(peer)}},
                "agent": provider.agent,
            }
        )
        mention = await world.mention(SHOP_CHANNEL, ALICE, QUESTION)

        def answered(server: SlackServer) -> bool:
            thread = server.thread(SHOP_CHANNEL, mention["ts"])
            return any(m.is_bot and ANSWER in m.text for m in thread)

        await world.slack.wait_for(answered, timeout=90)
        await world.drain()

        shown = "\n".join(
            m.text for m in world.slack.thread(SHOP_CHANNEL, mention["ts"]) if m.is_bot
        )
        assert ANSWER in shown
        assert "3 tool calls" in shown and "4 rounds" in shown
        # Native reasoning is sent back to the provider, never shown in the thread.
        assert THOUGHT not in shown and ROUNDS[0][2] not in shown
        check_wire(provider, peer)
        check_cluster(world.kube)
        # Each round's usage is the provider's own report, stored and added up in the footer.
        async with world.bots[-1].db.sessions() as session:
            rows = (await session.exec(select(UsageRow).order_by(col(UsageRow.id)))).all()
        assert [(r.input_tokens, r.output_tokens, r.estimated) for r in rows] == [
            (i, o, False) for i, o in peer.usage_reported
        ]
        total_in = sum(i for i, _ in peer.usage_reported)
        total_out = sum(o for _, o in peer.usage_reported)
        assert f"{total_in:,} in / {total_out:,} out tokens" in shown


@pytest.mark.parametrize("provider", PROVIDERS, ids=[p.name for p in PROVIDERS])
async def test_the_usage_is_what_the_provider_reported(
    provider: Provider, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KELPIE_TEST_MODEL_KEY", MODEL_KEY)
    async with provider.peer() as peer:
        peer.reply_tool_calls([("list_pods", {"namespace": "shop"})])
        peer.reply_text(ANSWER)
        cfg = parse_config(
            {
                "kubernetes": {"clusters": [{"name": "prod", "kubeconfig": "/nonexistent"}]},
                "models": {"profiles": {"default": provider.profile(peer)}},
            }
        )
        gateway = model_gateway(cfg, Secrets(cfg, dict(os.environ)), "default")
        usages = []
        for _ in range(2):  # a tool-call round, then the answer
            reply = await gateway.complete(ModelRequest(MESSAGES, TOOLS), _ignore)
            usages.append((reply.usage.input_tokens, reply.usage.output_tokens))
            assert reply.usage.estimated is False
        await gateway.close()
        assert usages == peer.usage_reported and len(usages) == 2
        peer.assert_script_consumed()


@pytest.mark.parametrize("provider", PROVIDERS, ids=[p.name for p in PROVIDERS])
async def test_three_round_investigation_in_kelpie_chat(provider: Provider, tmp_path: Path) -> None:
    peer, kube = provider.peer(), KubeServer()
    await peer.start()
    await kube.start()
    kube.seed_demo()
    kubeconfig = tmp_path / "kubeconfig"
    kube.write_kubeconfig(kubeconfig)
    no_slack = SimpleNamespace(api_url="http://127.0.0.1:9/api/")
    config = base_config(no_slack, peer, kubeconfig, tmp_path / "chat.db")  # type: ignore[arg-type]
    config["models"]["profiles"]["default"] = provider.profile(peer)
    config["agent"] = {**config["agent"], **provider.agent}
    config["channels"] = [{"match": {"name": "shop-*"}, "role": "viewer", "namespace": "shop"}]
    config_path = tmp_path / "kelpie.yaml"
    config_path.write_text(yaml.safe_dump(config))
    env = {
        "PATH": "/usr/bin:/bin",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "PYTHONPATH": str(REPO),
        "KELPIE_TEST_MODEL_KEY": MODEL_KEY,
    }
    script_investigation(peer)
    chat = Terminal(["--config", str(config_path), "--channel", "shop-oncall"], env, tmp_path)
    try:
        banner = await chat.expect("you> ")
        chat.type(QUESTION)
        end = await chat.expect(ANSWER, after=banner)
        footer_end = await chat.expect("]", after=end)
        turn = chat.text[banner:footer_end]
        assert all(f"✓ {name}" in turn for name, _, _ in ROUNDS), turn
        assert "4 rounds" in turn and "3 tool calls" in turn
        assert THOUGHT not in turn
        await chat.expect("you> ", after=footer_end)
        chat.type("/quit")
        assert await chat.wait_exit() == 0
        check_wire(provider, peer)
        check_cluster(kube)
    finally:
        await chat.close()
        await kube.stop()
        await peer.stop()


# --- thinking kept with its turn ---------------------------------------------------------

ANTHROPIC = next(p for p in PROVIDERS if p.name == "anthropic")
SCALE = {"namespace": "shop", "name": "checkout-api", "replicas": 5, "reason": "traffic spike"}
SCALE_THOUGHT = "Traffic doubled: five replicas should carry it."


async def test_a_turn_resumed_after_a_restart_sends_its_signed_thinking_back(
    tmp_path: Path,
) -> None:
    peer = ANTHROPIC.peer()
    async with running_world(tmp_path, peer) as world:
        settings = {"models": {"profiles": {"default": ANTHROPIC.profile(peer)}}}
        settings["agent"] = ANTHROPIC.agent
        peer.reply_tool_calls([("scale_deployment", SCALE)], reasoning=SCALE_THOUGHT)
        peer.reply_text("Scaled to 5 after the restart.")
        bot = await world.start_bot(settings)
        mention = await world.mention(OPS_CHANNEL, ALICE, "scale checkout-api to 5")
        card = await wait_card(world, mention["ts"], 60)
        await world.stop_bot(bot)

        await world.start_bot(settings)
        await click(world, CAROL, card)

        def answered(server: SlackServer) -> bool:
            thread = server.thread(OPS_CHANNEL, mention["ts"])
            return any(m.is_bot and "Scaled to 5 after the restart." in m.text for m in thread)

        await world.slack.wait_for(answered, timeout=90)
        await world.drain()
        # The peer refuses a tool-use turn sent back without the thinking it signed.
        peer.assert_script_consumed()
        [turn] = [m for m in peer.requests[-1]["messages"] if m["role"] == "assistant"]
        assert turn["content"][0] == {
            "type": "thinking",
            "thinking": SCALE_THOUGHT,
            "signature": sign_thinking(SCALE_THOUGHT),
        }


async def test_thinking_with_a_secret_is_sent_back_but_never_kept_or_shown(
    tmp_path: Path,
) -> None:
    _, text, secret = SECRETS[0]
    thought = f"The pod env shows {text}; I must not repeat it."
    peer = ANTHROPIC.peer()
    async with running_world(tmp_path, peer) as world:
        peer.reply_tool_calls([("list_pods", {"namespace": "shop"})], reasoning=thought)
        peer.reply_tool_calls([("list_events", {"namespace": "shop"})], reasoning=THOUGHT)
        peer.reply_text(ANSWER)
        await world.start_bot(
            {"models": {"profiles": {"default": ANTHROPIC.profile(peer)}}, "agent": ANTHROPIC.agent}
        )
        mention = await world.mention(SHOP_CHANNEL, ALICE, QUESTION)
        await world.slack.wait_for(
            lambda s: any(
                m.is_bot and ANSWER in m.text for m in s.thread(SHOP_CHANNEL, mention["ts"])
            ),
            timeout=90,
        )
        await world.drain()

        # Within the turn each round's thinking went back to the provider as signed.
        peer.assert_script_consumed()
        turns = [m for m in peer.requests[-1]["messages"] if m["role"] == "assistant"]
        assert [t["content"][0]["thinking"] for t in turns] == [thought, THOUGHT]
        # Kept: only the clean block, verbatim with its signature; the other is dropped.
        await world.bots[-1].payloads.drain()
        async with world.bots[-1].db.sessions() as session:
            kept = [
                row.thinking_json
                for row in (await session.exec(select(MessageRow).order_by(col(MessageRow.id))))
                if row.thinking_json
            ]
            payloads = [row.payload_json for row in await session.exec(select(PayloadRow))]
        assert [ThinkingBlock.from_openai(b) for k in kept for b in json.loads(k)] == [
            ThinkingBlock(THOUGHT, sign_thinking(THOUGHT))
        ]
        # The payload log (database, `/kelpie payload`) has the thinking masked.
        [payload] = payloads
        assert secret not in payload and "thinking_blocks[0]" in payload
        shown = "\n".join(m.text for m in world.slack.thread(SHOP_CHANNEL, mention["ts"]))
        assert secret not in shown and THOUGHT not in shown
