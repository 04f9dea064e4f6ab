"""A real world on localhost: the Slack, model and Kubernetes peers, and kelpie wired to them
by the same composition root `kelpie run` uses. Tests drive it the way a person would."""

from __future__ import annotations

import copy
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from bot.app import Kelpie, build_kelpie
from bot.approvals.verify import REAL_TIME, WatchTime
from bot.config import Config, Secrets, parse_config
from bot.slack.pacing import PacingLimits
from tests.peers.kube_server import KubeServer
from tests.peers.model_server import ModelServer, ScriptedPeer
from tests.peers.slack_server import RateLimits, SlackServer

SHOP_CHANNEL = "C0SHOP"  # #shop-oncall → viewer, default namespace shop
DEV_CHANNEL = "C0DEV1"  # #dev-payments → viewer by name glob
RANDOM_CHANNEL = "C0RANDOM"  # #random → not enabled
OPS_CHANNEL = "C0OPS"  # #shop-ops → operator: writes in shop with approval by CAROL or SRE group
ADMIN_CHANNEL = "C0ADMIN"  # #platform-admin → admin: everything, requester may approve
CAROL = "U0CAROL"  # an approver by user id
DAVE = "U0DAVE"  # an approver through the S0SRE user group
SRE_GROUP = "S0SRE"
ALICE = "U0ALICE"
BOB = "U0BOB"
MODEL_KEY = "sk-test-model-key-0123456789"
# The whole Authorization header kelpie sends an MCP server (`mcp.servers.*.headers`).
MCP_AUTH = "Bearer glsa_world_0123456789abcdef"
# The bearer token alert webhooks send (`alerts.receivers[].auth.token_env`).
ALERTS_TOKEN = "alerts-test-token-0123456789"
# A multi-tenant Loki's tenant (X-Scope-OrgID) and bearer token, named by the observe tests.
LOKI_TENANT = "team-shop"
LOKI_TOKEN = "loki-test-token-0123456789"
# The bearer tokens of two MCP clients (`mcp.clients[].token_env`; tests/test_mcp_server.py).
MCP_TOKENS = {
    "KELPIE_TEST_MCP_IDE": "mcp-ide-test-token-0123456789",
    "KELPIE_TEST_MCP_OPS": "mcp-ops-test-token-9876543210",
}
# Slack's rate limits keep their counts but run 30 times faster, in the fake Slack and in
# kelpie's pacer alike (a minute's budget every 2 s), so bursts stay quick to test.
SLACK_TIME_SCALE = 1 / 30


def base_config(
    slack: SlackServer, model: ScriptedPeer, kubeconfig: Path, db: Path | str
) -> dict[str, Any]:
    return {
        "slack": {
            "mode": "socket",
            "api_url": slack.api_url,
            "http": {"host": "127.0.0.1", "port": 0, "path": "/slack/events"},
            # A thread reads as progress message(s) then the answer as its own message;
            # tests/test_streaming.py covers native streaming and auto's fallback.
            "streaming": "update",
        },
        "database": {"url": db if isinstance(db, str) else f"sqlite:///{db}"},
        "server": {"health": {"host": "127.0.0.1", "port": 0}},
        "kubernetes": {
            "clusters": [
                {"name": "prod", "kubeconfig": str(kubeconfig), "description": "test cluster"}
            ]
        },
        "models": {
            "active": "default",
            "profiles": {
                "default": {
                    "model": "openai/test-model",
                    "api_base": model.api_base,
                    "auth": {"method": "environment", "env": "KELPIE_TEST_MODEL_KEY"},
                    "timeout_s": 20,
                }
            },
        },
        # The world's people are test drivers: one of them sends bursts many tests need
        # answered at once. The per-person cap's default is tested on its own
        # (tests/test_turn_queue.py), with this line removed.
        "agent": {"llm_retry_delay_s": 0.2, "max_turns_per_person": None},
        "roles": {
            "viewer": {"tools": ["present/*", "read/*", "diagnose/*"], "namespaces": ["*"]},
            "operator": {
                "tools": ["present/*", "read/*", "diagnose/*", "write/*"],
                "namespaces": ["shop", "team-*"],
                "approval": {
                    "approvers": {"users": [CAROL], "usergroups": [SRE_GROUP]},
                    "allow_requester": False,
                    "timeout_s": 300,
                },
            },
            "admin": {
                "tools": ["*"],
                "namespaces": ["*"],
                "approval": {"approvers": {"users": [ALICE]}, "allow_requester": True},
            },
        },
        "channels": [
            {"match": {"id": OPS_CHANNEL}, "role": "operator", "namespace": "shop"},
            {"match": {"id": ADMIN_CHANNEL}, "role": "admin"},
            {"match": {"id": SHOP_CHANNEL}, "role": "viewer", "namespace": "shop"},
            {"match": {"name": "dev-*"}, "role": "viewer"},
            {"match": {"im": True}, "role": "viewer"},
        ],
        "default_role": "none",
        # A memory proposal is a model call of its own (after a verified write, a resolved
        # alert): it would take a scripted reply meant for a turn. The memory tests turn it
        # on (tests/test_knowledge_memory.py).
        "knowledge": {"memory": {"enabled": False}},
    }


def environ(slack: SlackServer) -> dict[str, str]:
    return {
        "SLACK_BOT_TOKEN": slack.bot_token,
        "SLACK_APP_TOKEN": slack.app_token,
        "SLACK_SIGNING_SECRET": slack.signing_secret,
        "KELPIE_TEST_MODEL_KEY": MODEL_KEY,
        "KELPIE_TEST_ALERTS_TOKEN": ALERTS_TOKEN,
        "KELPIE_TEST_ALERTS_USER": "grafana",
        "KELPIE_TEST_ALERTS_PASSWORD": ALERTS_TOKEN[::-1],
        "KELPIE_TEST_LOKI_TENANT": LOKI_TENANT,
        "KELPIE_TEST_LOKI_TOKEN": LOKI_TOKEN,
        "KELPIE_TEST_MCP_AUTH": MCP_AUTH,
        **MCP_TOKENS,
    }


def merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    result = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = merge(result[key], value)
        else:
            result[key] = value
    return result


@dataclass
class World:
    slack: SlackServer
    model: ScriptedPeer
    kube: KubeServer
    tmp: Path
    config_data: dict[str, Any]
    bots: list[Kelpie] = field(default_factory=list)

    @property
    def config(self) -> Config:
        return parse_config(self.config_data)

    async def start_bot(
        self,
        override: dict[str, Any] | None = None,
        *,
        write_audit: Any = None,
        pacing: PacingLimits | None = None,
        clock: Callable[[], float] = time.monotonic,
        watch_time: WatchTime = REAL_TIME,
        alert_clock: Callable[[], datetime] | None = None,
    ) -> Kelpie:
        """`pacing`: the bot's idea of Slack's limits (default: Slack's, scaled like the
        fake's); `clock`: what its click limit and kept member lists measure time by;
        `watch_time`: what its verification watches measure and wait by."""
        if override:
            self.config_data = merge(self.config_data, override)
        secrets = Secrets(self.config, environ(self.slack))
        pacing = pacing or PacingLimits().scaled(SLACK_TIME_SCALE)
        bot = build_kelpie(
            self.config,
            secrets,
            write_audit=write_audit,
            pacing=pacing,
            clock=clock,
            watch_time=watch_time,
            **({"alert_clock": alert_clock} if alert_clock else {}),
        )
        await bot.start()
        self.bots.append(bot)
        if self.config.slack.mode.value == "socket":
            await self.slack.wait_connected()
        return bot

    async def stop_bot(self, bot: Kelpie) -> None:
        self.bots.remove(bot)
        await bot.stop()

    async def mention(self, channel: str, user: str, text: str, **kwargs: Any) -> dict[str, Any]:
        event = self.slack.mention(channel, user, text, **kwargs)
        await self.slack.deliver_event(event)
        return event

    async def wait_bot_replies(self, channel: str, thread_ts: str, count: int) -> list[Any]:
        """The bot's messages in a thread, once there are at least `count` of them."""

        def replies(server: SlackServer) -> list[Any] | None:
            found = [m for m in server.thread(channel, thread_ts) if m.is_bot]
            return found if len(found) >= count else None

        result: list[Any] = await self.slack.wait_for(replies, timeout=20)
        return result

    async def drain(self) -> None:
        for bot in self.bots:
            await bot.scheduler.drain(timeout=20)


@asynccontextmanager
async def running_world(
    tmp_path: Path, model: ScriptedPeer | None = None, *, database_url: str | None = None
) -> AsyncIterator[World]:
    """The world; `model` is another provider's peer in place of the OpenAI-compatible one.
    SQLite in `tmp_path` unless a database URL (a fresh PostgreSQL database) is given."""
    slack, kube = SlackServer(), KubeServer()
    model = model or ModelServer()
    slack.limits = RateLimits().scaled(SLACK_TIME_SCALE)
    await slack.start()
    await model.start()
    await kube.start()
    kube.seed_demo()
    slack.set_channel(SHOP_CHANNEL, "shop-oncall")
    slack.set_channel(DEV_CHANNEL, "dev-payments")
    slack.set_channel(RANDOM_CHANNEL, "random")
    slack.set_channel(OPS_CHANNEL, "shop-ops")
    slack.set_channel(ADMIN_CHANNEL, "platform-admin")
    slack.set_usergroup(SRE_GROUP, [DAVE])
    kubeconfig = tmp_path / "kubeconfig"
    kube.write_kubeconfig(kubeconfig)
    world = World(
        slack,
        model,
        kube,
        tmp_path,
        base_config(slack, model, kubeconfig, database_url or tmp_path / "k.db"),
    )
    try:
        yield world
    finally:
        for bot in list(world.bots):
            await bot.stop()
        await kube.stop()
        await model.stop()
        await slack.stop()
