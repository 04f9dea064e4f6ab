"""What kelpie does, counted for Prometheus (`/metrics`, text format).

One `Metrics` object per process, built by the composition root and handed to thin
wrappers at the seams where things happen: the model gateway (latency, tokens), the turn
reporters (turns, rounds, tool calls by tool and outcome), the approval store (decisions,
counted when a transition wins), and the Slack Web API client (errors by method and code,
429s). Nothing else in `bot/` knows about metrics. Each object has its own registry, so
several bots in one test process never share counts.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from bot.agent.events import ToolFinished, TurnEvent, TurnFinished
from bot.agent.session import Reporter, ReporterFactory, TurnMessages, TurnOrigin
from bot.model.types import ModelError, ModelGateway, ModelReply, ModelRequest, TextSink
from bot.store.approvals import ApprovalRepository
from bot.store.db import Database
from bot.store.turns import Replica
from bot.values import ApprovalState, SessionInfo

CONTENT_TYPE = CONTENT_TYPE_LATEST
# Model requests take from a fraction of a second to minutes (a local model, a long answer).
_LATENCY_BUCKETS = (0.25, 0.5, 1, 2, 5, 10, 20, 40, 80, 160)
# The `tool` label of a call to a name kelpie has no tool for: the model writes the names,
# and a label per invented name would grow the series without bound.
UNKNOWN_TOOL = "unknown"
# What becomes of an alert notification: every one is `received`, then `deduplicated` (a
# redelivery), `dropped` (no route) or `routed`; a routed group's investigation is
# `investigated` or `limited` (the channel's hour is used up). Receiver `slack`: an alerting
# app's messages in a watched channel (`dropped`: not matching its text_re; `deduplicated`:
# the same message in another delivery; Slack's retries of one delivery stop at the inbox).
ALERT_EVENTS = ("received", "deduplicated", "dropped", "routed", "investigated", "limited")


# What became of a call to kelpie's MCP server: a tool's status (ok, failed, denied,
# pending: a write at its card), or refused before any tool (unauthorized, unknown).
MCP_OUTCOMES = ("ok", "failed", "denied", "pending", "unauthorized", "unknown")


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.turns = Counter(
            "kelpie_turns", "Turns finished, by how they ended", ["finish"], registry=r
        )
        self.rounds = Counter("kelpie_rounds", "Model rounds used by finished turns", registry=r)
        self.tool_calls = Counter(
            "kelpie_tool_calls", "Tool calls by tool and outcome", ["tool", "outcome"], registry=r
        )
        self.approvals = Counter(
            "kelpie_approvals", "Approval requests ended, by decision", ["decision"], registry=r
        )
        self.slack_api_errors = Counter(
            "kelpie_slack_api_errors",
            "Slack Web API calls that failed, by method and error code",
            ["method", "error"],
            registry=r,
        )
        self.slack_rate_limited = Counter(
            "kelpie_slack_rate_limited",
            "Slack 429 answers (retried after Retry-After)",
            ["method"],
            registry=r,
        )
        self.model_latency = Histogram(
            "kelpie_model_request_seconds",
            "Model requests: time to the end of the stream, by outcome",
            ["model", "outcome"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.model_tokens = Counter(
            "kelpie_model_tokens",
            "Model tokens by direction (input, output)",
            ["model", "direction"],
            registry=r,
        )

        self.alerts = Counter(
            "kelpie_alert_notifications",
            "Alert notifications by receiver and what became of them",
            ["receiver", "event"],
            registry=r,
        )
        self.mcp_calls = Counter(
            "kelpie_mcp_calls",
            "Calls to kelpie's MCP server by client and outcome",
            ["client", "outcome"],
            registry=r,
        )

    def count_mcp_call(self, client: str, outcome: str) -> None:
        """`client` a configured MCP client's name ("" for a request with no valid token),
        `outcome` one of MCP_OUTCOMES: a closed label set."""
        self.mcp_calls.labels(client=client, outcome=outcome).inc()

    def count_alert(self, receiver: str, event: str) -> None:
        """`event` is one of ALERT_EVENTS, `receiver` a configured receiver type or `slack`:
        a closed label set (nothing from a payload becomes a label)."""
        self.alerts.labels(receiver=receiver, event=event).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)


class MeteredGateway:
    """A model gateway that times each request and counts its tokens."""

    def __init__(self, inner: ModelGateway, metrics: Metrics) -> None:
        self._inner = inner
        self._metrics = metrics

    @property
    def model_name(self) -> str:
        return self._inner.model_name

    async def complete(self, request: ModelRequest, on_text: TextSink) -> ModelReply:
        started = time.monotonic()
        model = self._inner.model_name
        try:
            reply = await self._inner.complete(request, on_text)
        except ModelError:
            self._metrics.model_latency.labels(model, "error").observe(time.monotonic() - started)
            raise
        self._metrics.model_latency.labels(model, "ok").observe(time.monotonic() - started)
        self._metrics.model_tokens.labels(model, "input").inc(reply.usage.input_tokens)
        self._metrics.model_tokens.labels(model, "output").inc(reply.usage.output_tokens)
        return reply


class _MeteredReporter:
    def __init__(self, inner: Reporter, metrics: Metrics, tools: frozenset[str]) -> None:
        self._inner = inner
        self._metrics = metrics
        self._tools = tools

    async def emit(self, event: TurnEvent) -> None:
        if isinstance(event, ToolFinished):
            tool = event.name if event.name in self._tools else UNKNOWN_TOOL
            self._metrics.tool_calls.labels(tool, event.status.value).inc()
        await self._inner.emit(event)

    async def close(self, finished: TurnFinished) -> None:
        self._metrics.turns.labels(finished.finish.value).inc()
        self._metrics.rounds.inc(finished.stats.rounds)
        await self._inner.close(finished)


class MeteredReporters:
    """Counts what every turn reports, whatever front end shows it; a tool call is labelled
    with its tool's name only when that is one of `tools` (the registered ones)."""

    def __init__(self, inner: ReporterFactory, metrics: Metrics, tools: Iterable[str]) -> None:
        self._inner = inner
        self._metrics = metrics
        self._tools = frozenset(tools)

    async def open(
        self, session: SessionInfo, origin: TurnOrigin, messages: TurnMessages
    ) -> Reporter:
        reporter = await self._inner.open(session, origin, messages)
        return _MeteredReporter(reporter, self._metrics, self._tools)

    async def settle(self, session: SessionInfo, *, awaiting_approval: bool) -> None:
        await self._inner.settle(session, awaiting_approval=awaiting_approval)


class MeteredApprovalRepository(ApprovalRepository):
    """Counts a decision when its transition wins: exactly once per approval, whoever
    (a click, the expiry sweeper, a withdrawal) ended it."""

    def __init__(self, db: Database, metrics: Metrics, replica: Replica | None = None) -> None:
        super().__init__(db, replica)
        self._metrics = metrics

    async def transition(
        self,
        approval_id: str,
        state: ApprovalState,
        *,
        by: str | None,
        now: datetime,
        require_unexpired: bool,
        require_expired: bool = False,
    ) -> bool:
        won = await super().transition(
            approval_id,
            state,
            by=by,
            now=now,
            require_unexpired=require_unexpired,
            require_expired=require_expired,
        )
        if won:
            self._metrics.approvals.labels(state.value).inc()
        return won


class MeteredWebClient(AsyncWebClient):
    """Every Web API call goes through `api_call`: a failure is counted by method and code."""

    def __init__(self, *args: Any, metrics: Metrics, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._metrics = metrics

    async def api_call(self, api_method: str, **kwargs: Any) -> AsyncSlackResponse:
        try:
            return await super().api_call(api_method, **kwargs)
        except SlackApiError as error:
            code = error.response.get("error") if error.response is not None else None
            self._metrics.slack_api_errors.labels(api_method, str(code or "unknown")).inc()
            raise
