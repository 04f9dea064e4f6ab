"""A stored thread as the export and the 👎 capture read it: its tool calls with their
results, which of them read something, and a fixture reader acting as the thread's role."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from bot.config import Config, RoleConfig
from bot.errors import ExportError
from bot.feedback.fixture import Fixture, FixtureReader
from bot.feedback.reads import plan_reads
from bot.pipeline.roles import ChannelBinding
from bot.store.tables import MessageRow, SessionRow
from bot.toolsets.kube.client import KubeClients
from bot.values import tool_calls_from_json

_EVIDENCE = re.compile(r"\[E\d+\]")


@dataclass(frozen=True)
class Call:
    turn_id: str
    name: str
    args: dict[str, Any]
    result: str  # as stored: rendered text, labelled `[E#]` when it read something

    @property
    def read_something(self) -> bool:
        """Not a denied, failed or not-run call, whose objects the agent never saw."""
        return _EVIDENCE.match(self.result) is not None


def thread_calls(messages: list[MessageRow]) -> list[Call]:
    results = {m.tool_call_id: m.content or "" for m in messages if m.role == "tool"}
    calls: list[Call] = []
    for message in messages:
        for call in tool_calls_from_json(message.tool_calls_json):
            try:
                args = json.loads(call.arguments or "{}")
            except json.JSONDecodeError:
                args = {}
            args = args if isinstance(args, dict) else {}
            calls.append(Call(message.turn_id, call.name, args, results.get(call.id, "")))
    return calls


def role_of(config: Config, session: SessionRow) -> RoleConfig:
    role = config.roles.get(session.role)
    if role is None:
        raise ExportError(
            f"the thread's role {session.role!r} is not in this config's roles; use the "
            "config kelpie ran with"
        )
    return role


async def read_fixture(
    config: Config, kube: KubeClients, session: SessionRow, calls: list[Call]
) -> Fixture:
    """What `calls` read, read again now as the thread's role (identity and namespaces)."""
    role = role_of(config, session)
    binding = ChannelBinding(session.role, role, session.cluster, session.namespace)
    client = kube.client_for(session.cluster).acting_as(binding.tool_context().identity)
    done = [(c.name, c.args) for c in calls if c.read_something]
    fixture = await FixtureReader(client, role.namespaces).read(plan_reads(done, session.namespace))
    fixture.missing += [
        f"{c.name}: read nothing (denied, failed or not run)" for c in calls if not c.read_something
    ]
    return fixture
