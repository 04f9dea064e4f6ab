"""A model profile's auth method decides exactly which credential a provider receives.

The gateway is built by the composition root from a parsed config, and the evidence is the
headers each provider peer recorded. LiteLLM reads provider keys from the process
environment, so the tests put keys there (the environment, not kelpie's code)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from bot.app import model_gateway
from bot.config import Secrets, parse_config
from bot.model.types import ModelError, ModelRequest
from tests.peers.model_server import ModelServer, ScriptedPeer
from tests.peers.provider_servers import AnthropicServer, GeminiServer, OllamaServer
from tests.world import ALICE, SHOP_CHANNEL, World

ENV_KEYS = {
    "OPENAI_API_KEY": "sk-env-openai-0123456789abcdef",
    "ANTHROPIC_API_KEY": "sk-ant-env-0123456789abcdef",
    "GEMINI_API_KEY": "env-gemini-0123456789abcdef",
    "OLLAMA_API_KEY": "env-ollama-0123456789abcdef",
}
NAMED_KEY = "sk-named-profile-key-0123456789"
MESSAGES = [{"role": "user", "content": "how is shop?"}]
CREDENTIAL_HEADERS = ("authorization", "x-api-key", "x-goog-api-key", "api-key")


async def _noop(_: str) -> None:
    return None


def config(model: str, api_base: str, auth: dict[str, Any], client: str = "litellm") -> Any:
    profile = {"model": model, "api_base": api_base, "auth": auth, "client": client}
    return parse_config(
        {
            "kubernetes": {"clusters": [{"name": "prod", "kubeconfig": "/nonexistent"}]},
            "models": {"profiles": {"default": profile}},
        }
    )


def credentials(peer: ScriptedPeer) -> list[dict[str, str]]:
    return [
        {k.lower(): v for k, v in headers.items() if k.lower() in CREDENTIAL_HEADERS}
        for headers in peer.headers
    ]


@pytest.fixture
def provider_keys_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in ENV_KEYS.items():
        monkeypatch.setenv(name, value)


# Both clients for the OpenAI wire: each must send exactly the credential the profile says.
CLIENTS = ["litellm", "openai-compatible"]
PEERS = [
    (ModelServer, "openai/test-model", "litellm"),
    (ModelServer, "openai/test-model", "openai-compatible"),
    (OllamaServer, "ollama_chat/test-model", "litellm"),
    (lambda: GeminiServer(model="gemini-test"), "gemini/gemini-test", "litellm"),
    (lambda: AnthropicServer(model="claude-test"), "anthropic/claude-test", "litellm"),
]


@pytest.mark.parametrize(
    ("make_peer", "model", "client"), PEERS, ids=[f"{m}-{c}" for _, m, c in PEERS]
)
async def test_auth_none_sends_no_credential_even_with_provider_keys_in_env(
    make_peer: Any, model: str, client: str, provider_keys_in_env: None
) -> None:
    async with make_peer() as peer:
        peer.reply_text("ok")
        cfg = config(model, peer.api_base, {"method": "none"}, client)
        gateway = model_gateway(cfg, Secrets(cfg, dict(os.environ)), "default")
        await gateway.complete(ModelRequest(MESSAGES), _noop)

        # No credential header at all, and no `key` parameter, as the server received it.
        assert credentials(peer) == [{}]
        assert all("key" not in r.query for r in peer.recorded)
        peer.assert_script_consumed()
        # Its own HTTP client is closed with the gateway: no connection is left open.
        assert peer.open_connections
        await gateway.close()
        await peer.wait_connections_closed()


@pytest.mark.parametrize("client", CLIENTS)
async def test_the_bot_closes_the_auth_none_client_when_it_stops(world: World, client: str) -> None:
    world.model.reply_text("All pods are running.")
    profile = {"auth": {"method": "none"}, "client": client}
    bot = await world.start_bot({"models": {"profiles": {"default": profile}}})
    mention = await world.mention(SHOP_CHANNEL, ALICE, "how is shop?")
    await world.slack.wait_for(
        lambda s: any("All pods" in m.text for m in s.thread(SHOP_CHANNEL, mention["ts"]))
    )
    assert credentials(world.model) == [{}]
    assert world.model.open_connections  # kept alive for the next question

    await world.stop_bot(bot)

    await world.model.wait_connections_closed()


@pytest.mark.parametrize("client", CLIENTS)
async def test_auth_environment_sends_only_the_named_variable(
    provider_keys_in_env: None, client: str
) -> None:
    async with ModelServer() as peer:
        peer.reply_text("ok")
        auth = {"method": "environment", "env": "KELPIE_KEY"}
        cfg = config("openai/test-model", peer.api_base, auth, client)
        secrets = Secrets(cfg, {**os.environ, "KELPIE_KEY": NAMED_KEY})
        gateway = model_gateway(cfg, secrets, "default")
        await gateway.complete(ModelRequest(MESSAGES), _noop)
        await gateway.close()
        assert credentials(peer) == [{"authorization": f"Bearer {NAMED_KEY}"}]


@pytest.mark.parametrize("client", CLIENTS)
async def test_auth_provider_default_uses_litellms_chain(
    provider_keys_in_env: None, client: str
) -> None:
    async with ModelServer() as peer:
        peer.reply_text("ok")
        cfg = config("openai/test-model", peer.api_base, {"method": "provider-default"}, client)
        gateway = model_gateway(cfg, Secrets(cfg, {}), "default")
        await gateway.complete(ModelRequest(MESSAGES), _noop)
        await gateway.close()
        assert credentials(peer) == [{"authorization": f"Bearer {ENV_KEYS['OPENAI_API_KEY']}"}]


@pytest.mark.parametrize("client", CLIENTS)
async def test_provider_default_without_openais_key_sends_nothing(
    monkeypatch: pytest.MonkeyPatch, client: str
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    async with ModelServer() as peer:
        cfg = config("openai/test-model", peer.api_base, {"method": "provider-default"}, client)
        gateway = model_gateway(cfg, Secrets(cfg, {}), "default")
        with pytest.raises(ModelError) as failure:
            await gateway.complete(ModelRequest(MESSAGES), _noop)
        await gateway.close()
        assert failure.value.user_message == (
            "The model rejected the API key: check models.profiles.default.auth."
        )
        assert (failure.value.retryable, failure.value.sent) == (False, False)
        assert peer.requests == []


async def test_provider_default_without_any_key_fails_instead_of_falling_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    async with AnthropicServer(model="claude-test") as peer:
        cfg = config("anthropic/claude-test", peer.api_base, {"method": "provider-default"})
        with pytest.raises(ModelError) as failure:
            await model_gateway(cfg, Secrets(cfg, {}), "default").complete(
                ModelRequest(MESSAGES), _noop
            )
        assert "models.profiles.default.auth" in failure.value.user_message
        assert peer.requests == []  # nothing was sent without a key


def test_a_missing_named_variable_is_one_sentence_at_start(tmp_path: Path) -> None:
    path = tmp_path / "kelpie.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "kubernetes": {"clusters": [{"name": "prod", "kubeconfig": "/nonexistent"}]},
                "models": {
                    "profiles": {
                        "default": {
                            "model": "openai/x",
                            "auth": {"method": "environment", "env": "KELPIE_MISSING_KEY"},
                        }
                    }
                },
            }
        )
    )
    repo = Path(__file__).resolve().parents[1]
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(repo),
        "SLACK_BOT_TOKEN": "xoxb-1",
        "SLACK_APP_TOKEN": "xapp-1",
        # A provider key is there, but the profile named another variable: no fallback.
        "OPENAI_API_KEY": ENV_KEYS["OPENAI_API_KEY"],
    }
    result = subprocess.run(
        [sys.executable, "-m", "bot.cli", "run", "--config", str(path)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if "KELPIE_MISSING_KEY" in line]
    assert len(lines) == 1
    assert (
        "models.profiles.default.auth.env: environment variable KELPIE_MISSING_KEY is not set"
        in (lines[0])
    )
