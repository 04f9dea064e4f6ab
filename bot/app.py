"""The composition root: builds every object once and wires them by constructor.

`kelpie run`, `kelpie check` and the tests all go through `build_kelpie`, so what the tests
exercise is what runs in production. Nothing else in `bot/` constructs collaborators.
"""

from __future__ import annotations

import gc
import logging
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import aiohttp
from aiohttp import web
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.async_app import AsyncApp
from slack_sdk.http_retry.builtin_async_handlers import AsyncConnectionErrorRetryHandler
from slack_sdk.web.async_client import AsyncWebClient

from bot.agent.compaction import Compactor
from bot.agent.continuation import DecisionTurns, TurnSubmit
from bot.agent.engine import Engine, RetryPolicy
from bot.agent.memory import MemoryProposer
from bot.agent.session import AgentSessions, ReporterFactory
from bot.agent.takeover import LeaseKeeper, Redelivery, Takeover
from bot.agent.turns import TurnCaps, TurnScheduler
from bot.alerts.investigate import AlertTurns, Investigations
from bot.alerts.receiver import AlertReceivers, Credentials
from bot.alerts.recovery import AlertRedelivery
from bot.alerts.threads import AlertThreads
from bot.alerts.watch import WatchedChannels
from bot.approvals.coordinator import WriteCoordinator
from bot.approvals.model import ApprovalCards, WriteAuditLog
from bot.approvals.readback import ReadbackByTool
from bot.approvals.recheck import Approvers, Bindings, CurrentPolicy
from bot.approvals.service import ApprovalRequests, ApprovalService, ExpiryBell, RecordedWrites
from bot.approvals.sli import PrometheusSlis
from bot.approvals.verify import REAL_TIME, Recovered, Rollbacks, Verifier, WatchTime
from bot.config import (
    ApprovalConfig,
    Config,
    ModelClient,
    OnNewMessage,
    Secrets,
    SlackMode,
    Tier,
    valid_roles,
)
from bot.eval.runner import EvalHarness
from bot.eval.surface import (
    AWAITING_IN_EVAL,
    Captures,
    DiscardedTurns,
    EvalApprovers,
    EvalBindings,
    EvalCards,
    EvalReporters,
    TappedGateway,
)
from bot.feedback.capture import FixtureCapture
from bot.feedback.export import ExportedCase, ThreadExport
from bot.feedback.links import parse_thread_link
from bot.health import health_app, serve
from bot.mcp.server_access import McpBindings, McpCallers, McpDecisions
from bot.metrics import (
    MeteredApprovalRepository,
    MeteredGateway,
    MeteredReporters,
    MeteredWebClient,
    Metrics,
)
from bot.model.gateway import LiteLLMGateway, probe_capabilities, warm_up
from bot.model.loop_thread import LoopThread
from bot.model.model_map import map_capabilities
from bot.model.openai_wire import OpenAIWireGateway
from bot.model.outbound import MaskingGateway, MaskMemo
from bot.model.router import CapabilityProbe, ModelRouter
from bot.model.types import ModelCapabilities, ModelGateway, ProviderGateway, ProviderSettings
from bot.pipeline.decision import Stage
from bot.pipeline.firewall import FirewallStage
from bot.pipeline.flow import (
    AbortStage,
    PermissionStage,
    Pipeline,
    ProviderNativeStage,
    RoleGateStage,
)
from bot.pipeline.guardian import GuardianStage
from bot.pipeline.harness import ToolHarness, ToolRegistry
from bot.pipeline.hooks import PostToolUseHooks, PreToolUseStage, SessionHooks
from bot.pipeline.roles import ChannelRoles, pattern_problems, tool_allowed
from bot.pipeline.tail import (
    ApprovalPort,
    ApprovalStage,
    ApprovedWrites,
    AuditLog,
    AuditStage,
    ExecuteStage,
    MaskStage,
    PostHook,
    PostHookStage,
)
from bot.pipeline.targets import ResolvedTargets
from bot.slack import copy
from bot.slack.adapter import SlackAdapter
from bot.slack.answer_buttons import answer_buttons
from bot.slack.at_rest import AtRest
from bot.slack.cards import ApprovalClicks, SlackApprovalCards
from bot.slack.channels import ChannelBindings, ChannelDirectory
from bot.slack.clicks import ClickLimit
from bot.slack.commands import SlashCommands
from bot.slack.feedback import FeedbackClicks
from bot.slack.guard import SlackHttpRoute, installed_workspace_only, warm_authorization
from bot.slack.inbox import Handled, InboxMiddleware
from bot.slack.memory import ChannelMembers, MemoryClicks, MemoryOffers
from bot.slack.pacing import PacingLimits, SlackPacer
from bot.slack.people import ApproverDirectory
from bot.slack.progress import SlackReporters
from bot.slack.progress.sessions import SessionStopEvents
from bot.slack.queued import QueuedNotices
from bot.slack.record import RecordClicks, RecordCommand
from bot.slack.recovery import SlackClosings, SlackOrphanNotices, SlackRedelivery
from bot.slack.safe_client import SafeWebClient
from bot.slack.stop import StopHandler
from bot.store.alerts import AlertGroups
from bot.store.approvals import (
    ApprovalRepository,
    WriteAuditRepository,
    WriteReservationRepository,
)
from bot.store.audit import session_of_thread
from bot.store.compaction import ThreadMemory
from bot.store.db import Database
from bot.store.feedback import FeedbackRepository
from bot.store.history import SessionOpenings
from bot.store.inbox import Inbox
from bot.store.memory import IncidentMemories, Resolution, ResolutionTrigger
from bot.store.payloads import PayloadLog
from bot.store.record import latest_thread_of, thread_rows
from bot.store.repositories import (
    MessageRepository,
    SessionRepository,
    ToolAuditRepository,
)
from bot.store.retention import Pruner, Retention
from bot.store.tables import utcnow
from bot.store.turns import Replica, TurnRepository
from bot.store.verify import VerifyWatchRepository
from bot.store.wakeups import PgListener, Wakeups
from bot.terminal import (
    WAITING_AT_PROMPT,
    ApprovalLeases,
    Console,
    FixedBinding,
    KeptRuntime,
    TerminalApprovalCards,
    TerminalApprovers,
    TerminalChat,
    TerminalReporters,
    TerminalTurns,
    terminal_binding,
    terminal_decider,
)
from bot.toolsets.investigate import investigation_tool
from bot.toolsets.knowledge.offers import KnowledgeOffers
from bot.toolsets.knowledge.toolset import (
    Knowledge,
    every_knowledge_tool,
    knowledge,
    knowledge_tools,
)
from bot.toolsets.kube.client import KubeClients
from bot.toolsets.kube.effects import KubeEffects
from bot.toolsets.kube.read import read_tools
from bot.toolsets.kube.readback import KubeReadback
from bot.toolsets.kube.write import write_tools
from bot.toolsets.observe.http import ObserveError, ObserveHttp
from bot.toolsets.observe.instances import KINDS, Instances
from bot.toolsets.observe.prometheus import Prometheus
from bot.toolsets.observe.silence import SILENCE_TOOL, SilenceReadback
from bot.toolsets.observe.tools import Observe, ObserveSettings
from bot.toolsets.observe.toolset import observe_tools
from bot.toolsets.present import present_tools
from bot.toolsets.spec import Tool, ToolSource
from bot.values import Approval, GitOpsPolicy

if TYPE_CHECKING:
    # The MCP SDK (with uvicorn and starlette, ~30 MB) is imported only where a server or
    # a client is configured: see `mcp_servers`, `_mcp_http`, `mcp_toolbox`.
    from bot.mcp.server import Count, McpToolbox
    from bot.mcp.server_http import McpHttp

log = logging.getLogger(__name__)

# Connections to Slack at most: calls beyond wait for a free one, so the count stays flat.
SLACK_CONNECTIONS = 8


class SlackClient(SafeWebClient, MeteredWebClient):
    """Every call masked and no post unfurled (`SafeWebClient`), then failures counted."""


def slack_pacer(metrics: Metrics, pacing: PacingLimits | None = None) -> SlackPacer:
    """The workspace pacer in front of every Slack call, its 429s counted."""

    def rate_limited(method: str) -> None:
        metrics.slack_rate_limited.labels(method).inc()

    return SlackPacer(pacing, on_rate_limited=rate_limited)


def slack_client(
    config: Config, secrets: Secrets, metrics: Metrics, pacer: SlackPacer
) -> AsyncWebClient:
    """The Slack client every part of the bot shares: every call masked, no post unfurled,
    failures counted, over one HTTP session (connections kept alive) whose `pacer` holds
    every call to its workspace's limits and honours Retry-After (bot/slack/pacing.py).
    Needs a running event loop; `Kelpie.stop` closes the session."""
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=SLACK_CONNECTIONS), middlewares=(pacer,)
    )
    return SlackClient(
        token=secrets.bot_token,
        base_url=config.slack.api_url,
        session=session,
        retry_handlers=[AsyncConnectionErrorRetryHandler()],
        metrics=metrics,
    )


# Seconds a thread may hold the GIL while another waits for it (CPython's default: 0.005).
GIL_SWITCH_S = 0.001
# aiohttp's own body limit on the alerts' listener: above every receiver's (a receiver
# answers 413 by its own limit, read from Content-Length or the body).
_ALERT_BODY_CEILING = 64 * 1024 * 1024
# How often a verification watch reads its target (at most; a third of a lease at least).
VERIFY_POLL_S = 5.0


def model_gateway(
    config: Config, secrets: Secrets, profile_name: str, litellm: LoopThread | None = None
) -> ProviderGateway:
    profile = config.models.profiles[profile_name]
    settings = ProviderSettings(
        model=profile.model,
        api_base=profile.api_base,
        api_key=secrets.model_api_key(profile_name),
        temperature=profile.temperature,
        max_tokens=profile.max_tokens,
        timeout_s=profile.timeout_s,
        options=dict(profile.options),
        profile=profile_name,
        auth=profile.auth.method,
    )
    if profile.client_choice.client is ModelClient.OPENAI_COMPATIBLE:
        return OpenAIWireGateway(settings)
    return LiteLLMGateway(settings=settings, thread=litellm)


class ModelGateways:
    """Each model profile's gateway, built once, and closed at shutdown: a gateway may hold
    its own HTTP client (`auth: none`). The LiteLLM profiles share one thread (started at
    first use, joined last), where the warm-up runs too: LiteLLM's cached clients belong to
    the loop that made them."""

    def __init__(self, config: Config, secrets: Secrets) -> None:
        self._config = config
        self._secrets = secrets
        self._built: dict[str, ProviderGateway] = {}
        self._litellm = LoopThread("kelpie-litellm")

    def __call__(self, profile: str) -> ProviderGateway:
        if profile not in self._built:
            self._built[profile] = model_gateway(
                self._config, self._secrets, profile, self._litellm
            )
        return self._built[profile]

    async def warm_up(self, model: str) -> None:
        await warm_up(model, self._litellm)

    async def close(self) -> None:
        for gateway in self._built.values():
            await gateway.close()
        await self._litellm.close()


def capability_probe(config: Config) -> CapabilityProbe:
    """LiteLLM's own probe for a model some profile reaches through LiteLLM; its model map
    read as data otherwise, so a bot on the direct client never imports LiteLLM."""
    through_litellm = {
        p.model
        for p in config.models.profiles.values()
        if p.client_choice.client is ModelClient.LITELLM
    }

    def probe(model: str) -> ModelCapabilities:
        if model in through_litellm:
            return probe_capabilities(model)
        return map_capabilities(model)

    return probe


def kube_clients(config: Config) -> KubeClients:
    return KubeClients.build(
        (
            cluster.name,
            str(Path(cluster.kubeconfig).expanduser()) if cluster.kubeconfig else None,
            cluster.context,
            cluster.in_cluster,
        )
        for cluster in config.kubernetes.clusters
    )


def observe(config: Config, secrets: Secrets, http: ObserveHttp) -> Observe:
    """The observability toolset's shared part: the instances (their secrets read now: a
    missing variable stops the start with one sentence), limits, the firewall's denied
    namespaces (no query reaches them, whatever a role says) and the wall clock."""
    section = config.observability
    settings = ObserveSettings(
        max_window_h=section.max_window_h,
        max_series=section.max_series,
        max_silence_h=section.max_silence_h,
        denied=tuple(config.firewall.deny_namespaces),
    )
    return Observe(http, Instances.from_config(section, secrets), settings, clock=time.time)


def readbacks(kube: KubeClients, observability: Observe) -> ReadbackByTool:
    """How a restart learns whether an approved write landed: from its own backend."""
    return ReadbackByTool(KubeReadback(kube), {SILENCE_TOOL: SilenceReadback(observability)})


class ServedTools(ToolSource, Protocol):
    """Other MCP servers' tools: connected at start, closed at the end."""

    async def start(self) -> None: ...

    async def close(self) -> None: ...


class NoMcpServers:
    """No `mcp.servers`: no tools, and the MCP SDK is never imported."""

    def tools(self) -> list[Tool]:
        return []

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None


def mcp_servers(config: Config, secrets: Secrets) -> ServedTools:
    """The configured MCP servers' toolset (the SDK imported only when there is one)."""
    if not config.mcp.servers:
        return NoMcpServers()
    from bot.toolsets.mcp.toolset import mcp_toolset

    return mcp_toolset(config.mcp.servers, secrets.mcp_values)


def tool_registry(
    kube: KubeClients,
    *,
    gitops: GitOpsPolicy = GitOpsPolicy.REFUSE,
    observability: Observe | None = None,
    kinds: tuple[str, ...] | None = None,
    sources: Sequence[ToolSource] = (),
    knowing: list[Tool] | None = None,
) -> ToolRegistry:
    """Every tool of this build; the observability tools of the configured backends (or
    of `kinds`: every kind when roles are checked against what a build can offer); the
    knowledge tools given (`knowing`); the tools `sources` offer as they are now (MCP
    servers')."""
    reads = read_tools(kube)
    writes = write_tools(kube, gitops=gitops)
    observing = observe_tools(observability, kinds) if observability is not None else []
    return ToolRegistry(
        [
            *reads,
            *present_tools(reads),
            investigation_tool(),
            *writes,
            *observing,
            *(knowing or []),
        ],
        sources,
    )


def config_problems(data: dict[str, Any]) -> list[str]:
    """What schema validation cannot see: a raw config's roles (those the schema accepts)
    checked against the tools this build has (no cluster is contacted; the tools are only
    listed). Run beside the schema, so one pass names every mistake."""
    return pattern_problems(valid_roles(data), buildable_tools())


def buildable_tools() -> list[Tool]:
    """Every tool this build can offer, whatever is configured (nothing is contacted)."""
    every = Observe(ObserveHttp(), Instances(), ObserveSettings(), clock=time.time)
    return tool_registry(
        KubeClients({}), observability=every, kinds=KINDS, knowing=every_knowledge_tool()
    ).all()


def security_stages(
    config: Config, gateways: ModelGateways, messages: MessageRepository
) -> list[Stage]:
    """The pipeline's checks in the design brief's order (its tail follows: see
    `call_pipeline`)."""
    stages: list[Stage] = [
        AbortStage(),
        ProviderNativeStage(),
        RoleGateStage(),
        PreToolUseStage(config.hooks.pre_tool_use),
        FirewallStage(config.firewall),
    ]
    if config.guardian.enabled:
        profile = config.guardian.model_profile
        stages.append(
            GuardianStage(
                # The guardian's requests leave kelpie too: the same outbound masking.
                MaskingGateway(gateways(profile)),
                recent=messages.recent_messages,
                timeout_s=config.models.profiles[profile].timeout_s,
            )
        )
    stages.append(PermissionStage())
    return stages


def call_pipeline(
    checks: list[Stage],
    *,
    timeout_s: float,
    approvals: ApprovalPort,
    writes: ApprovedWrites,
    post_hooks: list[PostHook],
    audit: AuditLog,
) -> Pipeline:
    """Every call's one ordered list: the checks, then approval → execute with timeout →
    mask → PostToolUse hooks → audit. An approved write resumed after its click passes
    the same list."""
    return Pipeline(
        checks,
        [
            ApprovalStage(approvals, audit, timeout_s),
            # A tool that resolves its target at run time asks the role gate and the
            # firewall again about it (bot/pipeline/targets.py).
            ExecuteStage(writes, timeout_s, ResolvedTargets(_target_checks(checks))),
            MaskStage(),
            PostHookStage(post_hooks),
            AuditStage(audit),
        ],
    )


def _target_checks(checks: list[Stage]) -> list[Stage]:
    """The checks that judge a resolved target: the role gate and the firewall (hooks and
    the guardian already saw the call as the model made it)."""
    return [stage for stage in checks if isinstance(stage, RoleGateStage | FirewallStage)]


class Drainable(Protocol):
    async def drain(self) -> None: ...


@dataclass
class Kelpie:
    """The running Slack bot: the shared core plus Slack's connection (socket or HTTP)."""

    config: Config
    core: AgentCore
    slack_app: AsyncApp
    scheduler: TurnScheduler
    inbox: Inbox
    app_token: str | None
    metrics: Metrics
    signing_secret: str
    # The heartbeat of this replica's leases, and the takeover of what dead ones left.
    keeper: LeaseKeeper
    # PostgreSQL: wakes this replica when another one's write concerns it (None: SQLite).
    listener: PgListener | None = None
    # Slack calls a turn's end left for later (bot/slack/progress), given up at stop.
    reporters: SlackReporters | None = None
    _socket: AsyncSocketModeHandler | None = None
    _runner: web.AppRunner | None = None
    http_port: int | None = None
    _health: web.AppRunner | None = None
    health_port: int | None = None
    # The alert webhooks (None: no receiver configured), on their own listener or Slack's.
    alerts: AlertReceivers | None = None
    _alerts_runner: web.AppRunner | None = None
    alerts_port: int | None = None
    # kelpie's MCP server for other agents (None: `server.mcp` not configured).
    mcp: McpHttp | None = None
    mcp_port: int | None = None
    # Incident memory offers (None: `knowledge.memory` off): takes over unfinished ones.
    memory_offers: MemoryOffers | None = None
    _started: bool = False

    # Handles the tests use to look inside.
    @property
    def db(self) -> Database:
        return self.core.db

    @property
    def messages(self) -> MessageRepository:
        return self.core.messages

    @property
    def sessions(self) -> SessionRepository:
        return self.core.sessions

    @property
    def approvals(self) -> ApprovalService:
        return self.core.approvals

    @property
    def payloads(self) -> PayloadLog:
        return self.core.payloads

    async def start(self, *, settle_heap: bool = False) -> None:
        """Probes first (a slow start is alive, not ready), then the store, the model library
        and only then Slack: the first question is answered as fast as the tenth.
        `settle_heap` (`kelpie run`, one bot per process): see `_settle_heap`."""
        health = self.config.server.health
        if health.enabled:
            self._health, self.health_port = await serve(
                health_app(self._readiness, self.metrics.render), health.host, health.port
            )
        await self.core.start()
        if self.listener is not None:
            self.listener.start()
        active = self.config.models.active_profile
        if active.client_choice.client is ModelClient.LITELLM:  # the wire has nothing to load
            await self.core.gateways.warm_up(active.model)
            # LiteLLM's thread holds the GIL while it parses; Python makes it hand the GIL
            # back only every switch interval (5 ms by default), and an ack needs several
            # wake-ups of this loop: shorter turns keep acks prompt (bench/README.md).
            sys.setswitchinterval(GIL_SWITCH_S)
        # The model's capabilities (LiteLLM's map) are read now, not by the first turn.
        await self.core.router.capabilities(active.model)
        await self.core.approvals.start()
        if settle_heap:
            _settle_heap()
        await warm_authorization(self.slack_app)  # Bolt's first event: no auth.test to wait for
        if self.config.slack.mode is SlackMode.SOCKET:
            self._socket = AsyncSocketModeHandler(self.slack_app, app_token=self.app_token)
            await self._socket.connect_async()
            log.info("connected to Slack in socket mode")
        else:
            await self._start_http()
        await self._start_alerts()
        await self._start_mcp()
        # After Slack: what a dead process left may need a reply in its thread.
        self.keeper.start()
        if self.memory_offers is not None:
            self.memory_offers.start()
        self._started = True

    async def _readiness(self) -> str | None:
        if not self._started:
            return "starting (store, model library, Slack connection)"
        try:
            await self.core.db.ping()
        except Exception:
            return "the database does not answer"
        if self._socket is not None and not await self._socket.client.is_connected():
            return "the Slack socket mode connection is down"
        return None

    async def _start_http(self) -> None:
        settings = self.config.slack.http
        web_app = web.Application()

        # Hostile requests are answered at the door (never a 500), replays processed once.
        route = SlackHttpRoute(
            app=self.slack_app, signing_secret=self.signing_secret, ledger=self.inbox
        )
        web_app.router.add_post(settings.path, route.handle)
        if self.alerts is not None and self.config.server.alerts is None:
            self.alerts.add_to(web_app)
        self._runner, self.http_port = await serve(web_app, settings.host, settings.port)
        log.info(
            "listening for Slack events on %s:%s%s", settings.host, self.http_port, settings.path
        )

    async def _start_alerts(self) -> None:
        listen = self.config.server.alerts
        if self.alerts is None or listen is None:
            return
        web_app = web.Application(client_max_size=_ALERT_BODY_CEILING)
        self.alerts.add_to(web_app)
        self._alerts_runner, self.alerts_port = await serve(web_app, listen.host, listen.port)
        log.info("listening for alert webhooks on %s:%s", listen.host, self.alerts_port)

    async def _start_mcp(self) -> None:
        listen = self.config.server.mcp
        if self.mcp is None or listen is None:
            return
        self.mcp_port = await self.mcp.start(listen.host, listen.port)

    async def stop(self) -> None:
        if self.mcp is not None:
            await self.mcp.stop()
        await self.keeper.stop()
        if self._alerts_runner is not None:
            await self._alerts_runner.cleanup()
        if self.alerts is not None:
            await self.alerts.drain()
        if self.listener is not None:
            await self.listener.drain()
        if self._socket is not None:
            await self._socket.close_async()
        for runner in (self._runner, self._health):
            if runner is not None:
                await runner.cleanup()
        await self.scheduler.close()
        if self.reporters is not None:
            await self.reporters.close()
        await self.core.close()
        session = self.slack_app.client.session
        if session is not None:
            await session.close()


def _settle_heap() -> None:
    """What is loaded before ready (LiteLLM alone is over a million objects) stays for the
    process's life: collect once, then move it out of the collector's sight (`gc.freeze`),
    so a full collection walks only what turns made since. Otherwise every full collection
    walked the whole heap, 300–700 ms with the event loop stopped: acknowledgements late.
    Not in tests: their process runs many bots, and a frozen object is never collected."""
    gc.collect()
    gc.freeze()


@dataclass
class AgentCore:
    """What every front end shares: the store, the tools, the security pipeline, approvals,
    the engine and the sessions. Slack (`build_kelpie`) and the terminal (`build_terminal`)
    differ only in where approval cards and a turn's progress are shown."""

    db: Database
    messages: MessageRepository
    sessions: SessionRepository
    kube: KubeClients
    registry: ToolRegistry
    approval_store: ApprovalRepository
    approvals: ApprovalService
    payloads: PayloadLog
    agent: AgentSessions
    background: list[Drainable]
    # The security pipeline every call (and every approval's re-check at the click) passes.
    pipeline: Pipeline
    router: ModelRouter
    # Prunes old conversations (and audits, when configured) in the background.
    retention: Pruner
    # The model profiles' gateways, closed last (no turn or check runs any more).
    gateways: ModelGateways
    # Each turn's state and lease (Slack only: the terminal runs no heartbeat).
    turns: TurnRepository | None = None
    # The observability tools' one HTTP session (Prometheus, Loki, Alertmanager).
    observe_http: ObserveHttp = field(default_factory=ObserveHttp)
    # Wake-ups from other replicas' writes (fed by a `PgListener` on PostgreSQL).
    wakeups: Wakeups = field(default_factory=Wakeups)
    # The configured MCP servers' connections (their tools are in `registry`).
    mcp: ServedTools = field(default_factory=lambda: NoMcpServers())
    # Told of each approved write that recovered (the front end offers a memory).
    recovered: list[Recovered] = field(default_factory=list)
    # The incidents people confirmed (`knowledge.memory`).
    memories: IncidentMemories | None = None

    async def start(self) -> None:
        await self.db.upgrade()
        await self.agent.warm_up()
        # Each server's first attempt, at most its timeout: one that is down is left out
        # (one log line) and tried again in the background.
        await self.mcp.start()
        self.retention.start()

    async def close(self) -> None:
        await self.approvals.close()
        await self.mcp.close()
        for background in self.background:
            await background.drain()
        self.kube.close()
        await self.observe_http.close()
        await self.db.close()
        await self.gateways.close()


@dataclass(frozen=True)
class FrontEnd:
    """What differs between Slack and the terminal: where cards and progress show, how a
    turn after a decision runs, the channel's current binding and who may approve."""

    cards: ApprovalCards
    reporters: ReporterFactory
    submit: TurnSubmit
    bindings: Bindings
    approvers: Approvers
    # The answer of a turn that ends at an approval: where to decide, in this front end.
    awaiting_approval: str
    # `kelpie chat --self-approve`: the person at the terminal may decide their own changes
    # where the role asks for someone else (four eyes), recorded as self-approved.
    self_approval: bool = False


def build_core(
    config: Config,
    secrets: Secrets,
    front: FrontEnd,
    metrics: Metrics,
    *,
    write_audit: WriteAuditLog | None = None,
    replica: Replica | None = None,
    watch_time: WatchTime = REAL_TIME,
    tap: Callable[[ModelGateway], ModelGateway] | None = None,
) -> AgentCore:
    """The shared core, with approval cards and progress going to the given front end.
    With a `replica`, every turn is recorded with its state and this replica's lease.
    `tap` wraps the active model's gateway inside the masking (`kelpie eval` records what
    the model was sent and wrote)."""
    db = Database(config.database.url, linger_s=config.database.linger_s)
    turns = TurnRepository(db=db, replica=replica) if replica is not None else None
    wakeups = Wakeups()
    # One memo for the model requests and the store: a message is masked once for both.
    memo = MaskMemo()
    messages = MessageRepository(db=db, memo=memo)
    sessions = SessionRepository(db)
    kube = kube_clients(config)
    observe_http = ObserveHttp()
    observability = observe(config, secrets, observe_http)
    # Other MCP servers' tools: connected at start, offered while they answer.
    mcp = mcp_servers(config, secrets)
    memories = IncidentMemories(db)
    recovered: list[Recovered] = []
    known = team_knowledge(config, kube, memories)
    registry = tool_registry(
        kube,
        gitops=config.kubernetes.gitops,
        observability=observability,
        sources=[mcp],
        knowing=knowledge_tools(known),
    )
    gateways = ModelGateways(config=config, secrets=secrets)
    post_hooks = PostToolUseHooks(config.hooks.post_tool_use)
    session_hooks = SessionHooks(config.hooks.session_start, config.hooks.session_end)
    # An approved change is leased to this replica until its outcome (one of its own when
    # there is no replica: `kelpie chat`).
    leases = replica or Replica.this_process(config.database.lease_s)
    approval_store = MeteredApprovalRepository(db=db, metrics=metrics, replica=leases)
    bell = ExpiryBell()
    requests = ApprovalRequests(store=approval_store, cards=front.cards, bell=bell)
    tool_audit = ToolAuditRepository(db)
    coordinator = WriteCoordinator(
        registry=registry,
        audit=write_audit or WriteAuditRepository(db),
        reservations=WriteReservationRepository(db),
        fence=approval_store,
    )
    pipeline = call_pipeline(
        security_stages(config, gateways, messages),
        timeout_s=config.agent.tool_timeout_s,
        approvals=requests,
        writes=RecordedWrites(coordinator=coordinator, store=approval_store),
        post_hooks=[post_hooks],
        audit=tool_audit,
    )
    harness = ToolHarness(registry, pipeline, tool_audit)
    payloads = PayloadLog(db)
    router = ModelRouter(config=config, probe=capability_probe(config))
    active: ModelGateway = gateways(config.models.active)
    engine = Engine(
        # Every request is masked, size-limited and kept (the last one per session).
        gateway=MaskingGateway(
            inner=MeteredGateway(inner=tap(active) if tap else active, metrics=metrics),
            sink=payloads,
            memo=memo,
        ),
        harness=harness,
        store=messages,
        retry=RetryPolicy(retries=config.agent.llm_retries, delay_s=config.agent.llm_retry_delay_s),
        awaiting_approval_answer=front.awaiting_approval,
    )
    agent = AgentSessions(
        config=config,
        sessions=sessions,
        conversation=messages,
        engine=engine,
        registry=registry,
        reporters=MeteredReporters(
            inner=front.reporters,
            metrics=metrics,
            tools=[tool.name for tool in registry.all()],
        ),
        hooks=session_hooks,
        router=router,
        openings=SessionOpenings(db),
        waiting=approval_store,
        ledger=turns,
        wakeups=wakeups,
        claim_poll_s=config.database.poll_s,
        bindings=front.bindings,
        compactor=compactor(config, gateways, db),
        knowledge=KnowledgeOffers(known.runbooks, known.incidents),
    )
    approvals = ApprovalService(
        store=approval_store,
        cards=front.cards,
        pipeline=pipeline,
        check=CurrentPolicy(
            registry=registry,
            sessions=sessions,
            bindings=front.bindings,
            approvers=front.approvers,
            self_approval=front.self_approval,
            turns=agent,
        ),
        # A decision on an MCP client's change starts no agent turn (bot/mcp/server_access.py).
        continuation=McpDecisions(
            DecisionTurns(
                conversation=messages, sessions=sessions, agent=agent, submit=front.submit
            )
        ),
        readback=readbacks(kube, observability),
        bell=bell,
        verifier=_verifier(
            config,
            secrets,
            db,
            leases,
            approval_store,
            kube,
            registry,
            front,
            requests,
            watch_time,
            recovered,
        ),
    )
    retention = Pruner(
        db=db,
        retention=Retention(
            conversations=timedelta(days=config.store.retention_days),
            audits=_days(config.store.audit_retention_days),
        ),
    )
    return AgentCore(
        db=db,
        messages=messages,
        sessions=sessions,
        kube=kube,
        registry=registry,
        approval_store=approval_store,
        approvals=approvals,
        payloads=payloads,
        agent=agent,
        # The payload log stores its last payloads at shutdown; retention stops.
        background=[post_hooks, session_hooks, payloads, retention],
        pipeline=pipeline,
        router=router,
        retention=retention,
        gateways=gateways,
        turns=turns,
        wakeups=wakeups,
        observe_http=observe_http,
        mcp=mcp,
        recovered=recovered,
        memories=memories,
    )


def team_knowledge(config: Config, kube: KubeClients, memories: IncidentMemories) -> Knowledge:
    """The runbooks (read with kelpie's own identity from the default cluster unless
    `knowledge.runbooks.cluster` says another) and the remembered incidents (never of the
    firewall's denied namespaces, whatever a role says)."""
    cluster = config.kubernetes.default_cluster
    denied = tuple(config.firewall.deny_namespaces)
    return knowledge(config.knowledge, kube, cluster, memories, denied)


def _verifier(
    config: Config,
    secrets: Secrets,
    db: Database,
    replica: Replica,
    approval_store: ApprovalRepository,
    kube: KubeClients,
    registry: ToolRegistry,
    front: FrontEnd,
    requests: ApprovalRequests,
    watch_time: WatchTime,
    recovered: list[Recovered],
) -> Verifier:
    """Follows approved writes' effects (`agent.verify_s`), leased like approvals."""
    http = ObserveHttp()
    return Verifier(
        store=VerifyWatchRepository(db, replica),
        approvals=approval_store,
        effects=KubeEffects(kube),
        cards=front.cards,
        rollbacks=Rollbacks(
            registry=registry,
            proposals=requests,
            timeout_s=lambda role: _approval_timeout(config, role),
            allowed=lambda role, tool: (
                role in config.roles and tool_allowed(config.roles[role], tool)
            ),
        ),
        slis=PrometheusSlis(
            config.roles,
            _prometheus_for(config, secrets, http),
            denied=tuple(config.firewall.deny_namespaces),
            http=http,
        ),
        verify_s=config.agent.verify_s,
        # Every poll renews the watch's lease: well within it.
        poll_s=min(VERIFY_POLL_S, config.database.lease_s / 3),
        time=watch_time,
        recovered=recovered,
    )


def _prometheus_for(
    config: Config, secrets: Secrets, http: ObserveHttp
) -> Callable[[str], Prometheus | None]:
    """The Prometheus serving a cluster, as the observe tools pick it (None: no instance)."""
    instances = Instances.from_config(config.observability, secrets)
    limits = (config.observability.max_window_h, config.observability.max_series)

    def find(cluster: str) -> Prometheus | None:
        try:
            endpoint = instances.pick("prometheus", cluster)
        except ObserveError:
            return None
        return Prometheus(http, endpoint, *limits)

    return find


def _approval_timeout(config: Config, role: str) -> float:
    found = config.roles.get(role)
    return found.approval.timeout_s if found is not None else ApprovalConfig().timeout_s


def _days(days: int | None) -> timedelta | None:
    return timedelta(days=days) if days is not None else None


def _feedback_clicks(slack_app: AsyncApp, core: AgentCore, inbox: Inbox, config: Config) -> None:
    """Answers' 👍/👎 (Slack's feedback buttons), stored once per person per answer; a 👎
    has what its turn read captured for `kelpie eval export`."""
    store = FeedbackRepository(core.db)
    capture = FixtureCapture(store, config, core.kube, utcnow)
    FeedbackClicks(
        app=slack_app, store=store, handled=inbox.handled, now=utcnow, on_negative=capture
    ).register()


async def export_case(config: Config, link: str, out: Path) -> ExportedCase:
    """`kelpie eval export`: the thread at `link` as a case folder under `out`."""
    ref = parse_thread_link(link)
    db = Database(config.database.url)
    kube = kube_clients(config)
    try:
        export = ThreadExport(FeedbackRepository(db), config, kube, utcnow)
        return await export.export(ref, out)
    finally:
        kube.close()
        await db.close()


def build_kelpie(
    config: Config,
    secrets: Secrets,
    *,
    write_audit: WriteAuditLog | None = None,
    pacing: PacingLimits | None = None,
    clock: Callable[[], float] = time.monotonic,
    watch_time: WatchTime = REAL_TIME,
    alert_clock: Callable[[], datetime] = utcnow,
) -> Kelpie:
    """Everything, wired. `write_audit` replaces the write-audit store (tests inject one that
    fails, to prove a write never runs without its intent audit); `pacing` replaces Slack's
    rate limits (tests count them over shorter windows, as their fake Slack does); `clock`
    is what the click limit and the approvers' kept member lists measure time by, and
    `watch_time` what the verification watches measure and wait by (tests move both on by
    hand)."""
    metrics = Metrics()
    pacer = slack_pacer(metrics, (pacing or PacingLimits()).shared(config.slack.rate_share))
    client = slack_client(config, secrets, metrics, pacer)
    signing_secret = secrets.signing_secret if config.slack.mode is SlackMode.HTTP else ""
    slack_app = AsyncApp(client=client, signing_secret=signing_secret)
    slack_app.middleware(installed_workspace_only)
    # Ahead of the inbox: a click past its person's limit is neither stored nor checked.
    slack_app.middleware(ClickLimit(client, clock=clock).process)
    scheduler = TurnScheduler(
        interrupt=config.slack.on_new_message is OnNewMessage.INTERRUPT,
        max_running=config.agent.max_concurrent_turns,
        caps=TurnCaps(
            per_person=config.agent.max_turns_per_person,
            per_lane=config.agent.max_turns_per_channel,
        ),
    )
    profile = config.models.active_profile
    notices = QueuedNotices(client)
    reporters = SlackReporters(
        client=client,
        config=config.slack,
        interrupt=scheduler.interrupt,
        model_name=profile.model,
        pacer=pacer,
        started=notices.started,
        answer_actions=answer_buttons(mark_resolved=config.knowledge.memory.enabled),
    )
    approvers = ApproverDirectory(client, clock=clock)
    channels = ChannelDirectory(client)
    roles = ChannelRoles(config)
    bindings = ChannelBindings(channels=channels, roles=roles)
    callers = McpCallers.from_config(config, secrets)
    front = FrontEnd(
        cards=SlackApprovalCards(client),
        reporters=reporters,
        submit=scheduler.submit,
        # An MCP client's session is bound to the client's role (its approvals' re-check).
        bindings=McpBindings(bindings, callers),
        approvers=approvers,
        awaiting_approval=copy.AWAITING_APPROVAL,
    )
    replica = Replica.this_process(config.database.lease_s)
    core = build_core(
        config=config,
        secrets=secrets,
        front=front,
        metrics=metrics,
        write_audit=write_audit,
        replica=replica,
        watch_time=watch_time,
    )
    assert core.turns is not None
    agent = core.agent
    inbox = Inbox(db=core.db, replica=replica)
    ApprovalClicks(app=slack_app, service=core.approvals, handled=inbox.handled).register()
    _feedback_clicks(slack_app, core, inbox, config)
    stop = StopHandler(
        app=slack_app,
        turns=reporters.turns,
        approvers=approvers,
        roles=config.roles,
        interrupt=scheduler.interrupt,
        withdraw=core.approvals.withdraw_for,
        sessions=core.sessions,
        handled=inbox.handled,
        elsewhere=core.turns,
        notices=notices,
    )
    stop.register()
    SessionStopEvents(
        app=slack_app,
        turns=reporters.turns,
        sessions=reporters.sessions,
        stop=stop.stop,
        stop_elsewhere=stop.stop_elsewhere,
        stop_queued=stop.stop_queued,
    ).register()
    alert_turns = AlertTurns(
        agent=agent, scheduler=scheduler, roles=roles, channels=channels, notices=notices
    )
    investigations = Investigations(
        client,
        AlertGroups(core.db),
        alert_turns,
        config.alerts.max_investigations_per_hour,
        metrics.count_alert,
        alert_clock,
    )
    watched = _watched_channels(config, core.db, investigations, metrics, alert_clock)
    # Registered first: every request is stored before Bolt acknowledges it.
    at_rest = AtRest(bindings.enabled, watched.kept_text if watched else None)
    slack_app.middleware(InboxMiddleware(inbox, at_rest).process)
    SlashCommands(
        app=slack_app,
        channels=channels,
        roles=roles,
        registry=core.registry,
        sessions=core.sessions,
        payloads=core.payloads,
        approvers=approvers,
        models=core.router,
        handled=inbox.handled,
        record=_record_command(client, core.db),
    ).register()
    _record_clicks(slack_app, core.db, inbox.handled).register()
    SlackAdapter(
        app=slack_app,
        config=config.slack,
        channels=channels,
        roles=roles,
        sessions=core.sessions,
        agent=agent,
        scheduler=scheduler,
        withdraw=core.approvals.withdraw_for,
        handled=inbox.handled,
        notices=notices,
        watched=watched,
    ).register()
    offers = incident_memory(config, core, client, slack_app, inbox.handled, alert_clock)
    redelivery: Redelivery = SlackRedelivery(app=slack_app, handled=inbox.handled)
    receivers = None
    if config.alerts.receivers:
        threads = AlertThreads(
            config=config.alerts,
            client=client,
            groups=AlertGroups(core.db),
            investigations=investigations,
            handled=inbox.handled,
            count=metrics.count_alert,
            clock=alert_clock,
            resolved=offers.offer if offers is not None else None,
        )
        receivers = AlertReceivers(
            _receiver_credentials(config, secrets),
            inbox.record,
            threads.handle,
            metrics.count_alert,
        )
        redelivery = AlertRedelivery(threads, redelivery, inbox.handled)
    takeover = Takeover(
        leases=core.turns,
        deliveries=inbox,
        notices=SlackOrphanNotices(client=client, sessions=reporters.sessions),
        redelivery=redelivery,
        agent=agent,
        submit=scheduler.submit,
        interrupt=stop.interrupt_elsewhere,
        approvals=core.approvals,
        closings=SlackClosings(calls=reporters.closing, sent=core.turns.closing_sent),
    )
    keeper = LeaseKeeper(
        heartbeat=takeover,
        interval_s=config.database.lease_s / 3,
        wakeups=core.wakeups,
        lease_s=config.database.lease_s,
    )
    listener = (
        None if core.db.is_sqlite else PgListener(url=config.database.url, wakeups=core.wakeups)
    )
    app_token = secrets.app_token if config.slack.mode is SlackMode.SOCKET else None
    return Kelpie(
        config=config,
        core=core,
        slack_app=slack_app,
        scheduler=scheduler,
        inbox=inbox,
        app_token=app_token,
        metrics=metrics,
        signing_secret=signing_secret,
        keeper=keeper,
        listener=listener,
        reporters=reporters,
        alerts=receivers,
        mcp=_mcp_http(core, callers, metrics) if config.server.mcp is not None else None,
        memory_offers=offers,
    )


def _mcp_http(core: AgentCore, callers: McpCallers, metrics: Metrics) -> McpHttp:
    """kelpie's MCP server for other agents (`server.mcp`); the SDK is imported only here."""
    from bot.mcp.server_http import McpHttp

    return McpHttp(mcp_toolbox(core, metrics.count_mcp_call), callers, metrics.count_mcp_call)


def _watched_channels(
    config: Config,
    db: Database,
    investigations: Investigations,
    metrics: Metrics,
    clock: Callable[[], datetime],
) -> WatchedChannels | None:
    """The channels where an alerting app already posts (`alerts.watch`), if any."""
    if not config.alerts.watch:
        return None
    return WatchedChannels(
        config.alerts, AlertGroups(db), investigations, metrics.count_alert, clock
    )


async def serve_mcp_stdio(config: Config, secrets: Secrets, token: str | None) -> None:
    """`kelpie mcp serve --stdio`: kelpie's MCP server over this process's stdin/stdout,
    for the client whose token is `token`. A write's card is posted in Slack with the bot
    token; its click reaches `kelpie run` (on the same database), which decides and runs it.
    No Slack connection is opened here and no agent turn runs."""
    kelpie = build_kelpie(config, secrets)
    caller = McpCallers.from_config(config, secrets).authenticate(token)
    if caller is None:
        log.warning("kelpie mcp serve: KELPIE_MCP_TOKEN names no configured MCP client")
    from bot.mcp.server_http import serve_stdio

    await kelpie.core.start()
    try:
        await serve_stdio(mcp_toolbox(kelpie.core), caller)
    finally:
        await kelpie.stop()


def mcp_toolbox(core: AgentCore, count: Count | None = None) -> McpToolbox:
    """kelpie's tools for MCP callers, through the core's one pipeline; `count` counts each
    call by client and outcome (`kelpie_mcp_calls_total`)."""
    from bot.mcp.server import McpToolbox

    harness = ToolHarness(core.registry, core.pipeline, ToolAuditRepository(core.db))

    async def durable() -> None:
        await core.db.write(_nothing)  # commits whatever was queued before it

    return McpToolbox(
        core.registry, harness, core.sessions, core.approval_store, durable, count or _not_counted
    )


def _nothing(session: object) -> None:
    return None


def _not_counted(client: str, outcome: str) -> None:
    return None  # `kelpie mcp serve --stdio` serves no /metrics


def incident_memory(
    config: Config,
    core: AgentCore,
    client: AsyncWebClient,
    slack_app: AsyncApp,
    handled: Handled,
    clock: Callable[[], datetime],
) -> MemoryOffers | None:
    """Memory a person confirms (`knowledge.memory`): proposals by the low-tier model when a
    thread resolves (an alert, a verified write, Mark resolved), the card's clicks."""
    if not config.knowledge.memory.enabled or core.memories is None:
        return None
    profile = memory_profile(config)
    timeout_s = config.models.profiles[profile].timeout_s
    proposer = MemoryProposer(
        MaskingGateway(core.gateways(profile)), core.messages, timeout_s=timeout_s
    )
    # Held while the low tier proposes (its timeout) and the card is posted.
    hold = timedelta(seconds=2 * timeout_s + 60)
    offers = MemoryOffers(client, core.memories, proposer, core.sessions, clock, hold)
    core.background.insert(0, offers)  # drained before the store closes

    async def recovered(approval: Approval, verdict: str) -> None:
        await offers.offer(
            Resolution(
                channel_id=approval.channel_id,
                thread_ts=approval.thread_ts,
                trigger=ResolutionTrigger.VERIFIED_WRITE,
                ref=approval.id,
                by=approval.decided_by or approval.requested_by,
                session_id=approval.session_id,
                evidence=verdict,
            )
        )

    core.recovered.append(recovered)
    members = ChannelMembers(client)
    MemoryClicks(slack_app, offers, core.memories, members, handled, clock).register()
    return offers


def memory_profile(config: Config) -> str:
    """The profile that proposes memories: the configured one, else a low-tier one, else
    the active one."""
    chosen = config.knowledge.memory.model_profile
    if chosen is not None:
        return chosen
    profiles = config.models.profiles
    low = [name for name, profile in profiles.items() if profile.tier is Tier.LOW]
    return low[0] if low else config.models.active


def _receiver_credentials(config: Config, secrets: Secrets) -> list[Credentials]:
    """Each receiver's expected credentials, read from the environment once, at startup."""
    return [
        Credentials.build(
            receiver.type.value,
            receiver.auth.method,
            secrets.receiver_credentials(index),
            receiver.max_body_bytes,
        )
        for index, receiver in enumerate(config.alerts.receivers)
    ]


def build_terminal(
    config: Config,
    secrets: Secrets,
    channel_name: str | None,
    *,
    console: Console | None = None,
    self_approve: bool = False,
) -> TerminalChat:
    """`kelpie chat`: the shared core with progress and approvals at a terminal prompt, in the
    role the config gives a channel of that name (no name: the `im: true` mapping). Raises
    `ChannelNotEnabled` when that channel maps to no role. No Slack client is built.

    Four eyes hold as in Slack: where the role does not allow the requester, the person at
    the terminal cannot decide their own change, unless the operator passed
    `self_approve` (`--self-approve`), which is recorded with every decision."""
    binding = terminal_binding(ChannelRoles(config), channel_name)
    console = console or Console()
    profile = config.models.active_profile
    cards = TerminalApprovalCards(console)
    reporters = TerminalReporters(console, model_name=profile.model)
    turns = TerminalTurns()
    front = FrontEnd(
        cards=cards,
        reporters=reporters,
        submit=turns.submit,
        bindings=FixedBinding(binding),
        approvers=TerminalApprovers(),
        awaiting_approval=WAITING_AT_PROMPT,
        self_approval=self_approve,
    )
    core = build_core(config=config, secrets=secrets, front=front, metrics=Metrics())
    keeper = LeaseKeeper(
        heartbeat=ApprovalLeases(core.approval_store), interval_s=config.database.lease_s / 3
    )
    return TerminalChat(
        console=console,
        agent=core.agent,
        binding=binding,
        channel_name=channel_name,
        runtime=KeptRuntime(core=core, keeper=keeper),
        decisions=core.approvals,
        turns=turns,
        cards=cards,
        decider=terminal_decider(self_approve),
    )


def build_eval(config: Config, secrets: Secrets, *, judge: str | None = None) -> EvalHarness:
    """`kelpie eval`: the shared core with the terminal surface's rendering in-process
    (bot/eval/surface.py): approval cards are recorded and never approved, a turn after a
    decision never runs, and the model gateway is tapped for the grader. `judge`: the
    profile of the LLM judge (free-text facts only)."""
    captures = Captures()
    roles = ChannelRoles(config)
    front = FrontEnd(
        cards=EvalCards(captures),
        reporters=EvalReporters(captures, model_name=config.models.active_profile.model),
        submit=DiscardedTurns(captures).submit,
        bindings=EvalBindings(roles),
        approvers=EvalApprovers(),
        awaiting_approval=AWAITING_IN_EVAL,
    )
    core = build_core(
        config=config,
        secrets=secrets,
        front=front,
        metrics=Metrics(),
        tap=lambda gateway: TappedGateway(gateway, captures),
    )
    options = config.models.active_profile.options
    prices = None
    if "input_cost_per_token" in options and "output_cost_per_token" in options:
        prices = (float(options["input_cost_per_token"]), float(options["output_cost_per_token"]))

    return EvalHarness(
        sessions=core.agent,
        decisions=core.approvals,
        roles=roles,
        captures=captures,
        start=core.start,
        close=core.close,
        model_name=config.models.active_profile.model,
        prices=prices,
        judge=core.gateways(judge) if judge else None,
    )


def _record_command(client: Any, db: Database) -> RecordCommand:
    """`/kelpie record` (#32): the incident record, made from the store."""
    return RecordCommand(
        client,
        rows=lambda session_id: thread_rows(db, session_id),
        latest=lambda channel, user: latest_thread_of(db, channel, user),
        by_thread=lambda channel, ts: session_of_thread(db, channel, ts),
    )


def _record_clicks(app: Any, db: Database, handled: Any) -> RecordClicks:
    """The Record button on an answer."""
    sessions = SessionRepository(db)

    async def find(session_key: str) -> int | None:
        found = await sessions.find(session_key)
        return found.id if found is not None else None

    return RecordClicks(app, find, lambda session_id: thread_rows(db, session_id), handled)


def compactor(config: Config, gateways: ModelGateways, db: Database) -> Compactor | None:
    """Long threads (#32): older rounds summarized by `agent.summary_profile` (the low
    tier; default the active profile), its requests masked like every other."""
    if not config.agent.compact_history:
        return None
    profile = config.agent.summary_profile or config.models.active
    return Compactor(memory=ThreadMemory(db), summarizer=MaskingGateway(gateways(profile)))
