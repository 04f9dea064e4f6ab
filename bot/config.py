"""The configuration schema (pydantic), YAML loading and secret resolution from env vars.

Names follow `config/kelpie.example.yaml`. Secrets never live in the file: every `*_env`
key names an environment variable, read by `Secrets`. Validation errors become one line per
problem naming the key path and the fix, raised as `ConfigError`.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum
from fnmatch import fnmatchcase
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Union, get_args, get_origin

import re2
import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from bot.errors import ConfigError
from bot.values import GitOpsPolicy

TOOL_KINDS = ("present", "read", "diagnose", "write")
MAX_ITERATIONS_CEILING = 40
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
# The built-in kinds of the API groups a cluster serves without add-ons: the firewall
# matches `deny_kinds` against these (case-insensitively), so a misspelt kind would deny
# nothing. Custom kinds (read by the generic tools) are written `Kind.group`.
KUBERNETES_KINDS = (
    "Binding", "ComponentStatus", "ConfigMap", "Endpoints", "Event", "LimitRange",
    "Namespace", "Node", "PersistentVolume", "PersistentVolumeClaim", "Pod", "PodTemplate",
    "ReplicationController", "ResourceQuota", "Secret", "Service", "ServiceAccount",
    "ControllerRevision", "DaemonSet", "Deployment", "ReplicaSet", "StatefulSet",
    "HorizontalPodAutoscaler", "CronJob", "Job", "Lease", "EndpointSlice", "Ingress",
    "IngressClass", "NetworkPolicy", "PodDisruptionBudget", "ClusterRole",
    "ClusterRoleBinding", "Role", "RoleBinding", "PriorityClass", "CSIDriver", "CSINode",
    "CSIStorageCapacity", "StorageClass", "VolumeAttachment", "RuntimeClass",
    "CustomResourceDefinition", "APIService", "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration", "CertificateSigningRequest", "FlowSchema",
    "PriorityLevelConfiguration",
)  # fmt: skip
_KINDS_LOWER = {kind.lower() for kind in KUBERNETES_KINDS}


def _did_you_mean(word: str, choices: Iterable[str]) -> str:
    """` (did you mean "x"?)` for the closest choice, or "" when nothing is close."""
    by_lower = {choice.lower(): choice for choice in choices}
    close = difflib.get_close_matches(word.lower(), list(by_lower), n=1, cutoff=0.6)
    return f' (did you mean "{by_lower[close[0]]}"?)' if close else ""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SlackMode(StrEnum):
    SOCKET = "socket"
    HTTP = "http"


class StreamingMode(StrEnum):
    AUTO = "auto"
    NATIVE = "native"
    UPDATE = "update"


class OnNewMessage(StrEnum):
    INTERRUPT = "interrupt"
    QUEUE = "queue"


class HttpListen(_Strict):
    host: str = "0.0.0.0"
    port: int = Field(default=3000, ge=0, le=65535)  # 0: any free port
    path: str = "/slack/events"


class SlackConfig(_Strict):
    mode: SlackMode = SlackMode.SOCKET
    bot_token_env: str = "SLACK_BOT_TOKEN"
    app_token_env: str = "SLACK_APP_TOKEN"
    signing_secret_env: str = "SLACK_SIGNING_SECRET"
    # Optional, read only by `kelpie check`: an app configuration token (xoxe.xoxp-…) lets
    # it read the app's manifest and see its event subscriptions, which no bot token can.
    config_token_env: str = "SLACK_CONFIG_TOKEN"
    api_url: str = "https://slack.com/api/"
    http: HttpListen = HttpListen()
    streaming: StreamingMode = StreamingMode.AUTO
    thread_followups: bool = True
    on_new_message: OnNewMessage = OnNewMessage.INTERRUPT
    status_reactions: bool = True
    # People from another organisation in a Slack Connect channel get this role in every
    # channel, not the channel's ("none": kelpie does not answer them).
    external_users_role: str = "none"
    # The share of Slack's per-workspace rate limits this process paces itself to: Slack
    # counts an app's calls per workspace, whichever process makes them, so each of N
    # replicas takes 1/N (bot/slack/pacing.py).
    rate_share: float = Field(default=1.0, gt=0, le=1)


class DatabaseConfig(_Strict):
    url: str = "sqlite:///./kelpie.db"
    # How long a replica's hold on its turns outlives its last heartbeat (one every third of
    # it): after a crash, its turns are taken over (closed or run) about this much later.
    lease_s: float = Field(default=15.0, ge=2, le=600)
    # How often a replica re-reads the shared turns table when nothing woke it: a turn
    # waiting for its thread. On PostgreSQL a notification wakes it at once; this is the
    # fallback should one be lost (SQLite: the only way).
    poll_s: float = Field(default=0.5, gt=0, le=600)
    # How long a write nobody waits for (a round's tool results, usage, read audits) waits
    # to ride with the next commit before it is committed on its own.
    linger_s: float = Field(default=0.5, gt=0, le=600)


class StoreConfig(_Strict):
    """How long the database keeps things. Conversations (sessions, messages, tool results,
    usage, the payload log, the thread's feedback) go once idle for `retention_days`;
    approvals and audits are the record of who did what, so they have their own setting,
    kept forever unless set."""

    retention_days: int = Field(default=30, ge=1)
    audit_retention_days: int | None = Field(default=None, ge=1)

    @field_validator("audit_retention_days")
    @classmethod
    def _audits_outlive_conversations(cls, days: int | None, info: ValidationInfo) -> int | None:
        conversations = info.data.get("retention_days")
        if days is not None and conversations is not None and days < conversations:
            raise ValueError(
                f"{days} is shorter than store.retention_days ({conversations}); audits "
                "must outlive the conversations they record (leave it unset to keep them)"
            )
        return days


class ClusterConfig(_Strict):
    name: str
    kubeconfig: str | None = None
    in_cluster: bool = False
    context: str | None = None
    description: str = ""

    @model_validator(mode="after")
    def _one_source(self) -> ClusterConfig:
        if not self.in_cluster and not self.kubeconfig:
            raise ValueError("set kubeconfig: <path> or in_cluster: true")
        return self


class KubernetesConfig(_Strict):
    clusters: list[ClusterConfig] = Field(min_length=1)
    default: str | None = None
    # A write to an object Argo CD or Flux manages: refused (its controller would revert it)
    # or proposed with a warning on its card.
    gitops: GitOpsPolicy = GitOpsPolicy.REFUSE

    @model_validator(mode="after")
    def _default_exists(self) -> KubernetesConfig:
        names = [c.name for c in self.clusters]
        if len(set(names)) != len(names):
            raise ValueError("cluster names must be unique")
        if self.default is not None and self.default not in names:
            raise ValueError(f'default "{self.default}" is not a cluster name ({", ".join(names)})')
        return self

    @property
    def default_cluster(self) -> str:
        return self.default or self.clusters[0].name


class AuthMethod(StrEnum):
    NONE = "none"
    ENVIRONMENT = "environment"
    PROVIDER_DEFAULT = "provider-default"


class ModelAuth(_Strict):
    method: AuthMethod = AuthMethod.NONE
    env: str | None = None

    @model_validator(mode="after")
    def _env_named(self) -> ModelAuth:
        if self.method is AuthMethod.ENVIRONMENT and not self.env:
            raise ValueError("auth method environment needs env: <VARIABLE_NAME>")
        return self


class Tier(StrEnum):
    LOW = "low"
    HIGH = "high"


class ModelClient(StrEnum):
    """How kelpie talks to a profile's model: through LiteLLM (every provider), directly over
    the OpenAI Chat Completions wire (faster and lighter; `openai/` models only), or `auto`:
    the wire where it can serve the profile, LiteLLM otherwise (`ModelProfile.client_choice`)."""

    AUTO = "auto"
    LITELLM = "litellm"
    OPENAI_COMPATIBLE = "openai-compatible"


# What `options` may not hold with client openai-compatible, whose options are fields of the
# request body: LiteLLM's own settings (no server knows them) and the fields kelpie sets.
# With client auto, a profile naming any of them goes through LiteLLM.
WIRE_REFUSED_OPTIONS = frozenset(
    {
        "drop_params",
        "additional_drop_params",
        "num_retries",
        "max_retries",
        "timeout",
        "request_timeout",
        "api_key",
        "api_base",
        "base_url",
        "api_version",
        "organization",
        "custom_llm_provider",
        "input_cost_per_token",
        "output_cost_per_token",
        "mock_response",
        "headers",
        "extra_headers",
        "extra_body",
        "model",
        "messages",
        "tools",
        "stream",
        "stream_options",
    }
)
WIRE_MODEL_PREFIX = "openai/"


@dataclass(frozen=True)
class ClientChoice:
    """The client a profile uses, and why, in words `kelpie check` prints."""

    client: ModelClient
    why: str


class ModelProfile(_Strict):
    model: str
    api_base: str | None = None
    auth: ModelAuth = ModelAuth()
    client: ModelClient = ModelClient.AUTO
    tier: Tier | None = None
    temperature: float = Field(default=0.1, ge=0, le=2)
    max_tokens: int = Field(default=8192, ge=1)
    timeout_s: float = Field(default=120, gt=0)
    options: dict[str, Any] = Field(default_factory=dict)

    @property
    def wire_refused_options(self) -> list[str]:
        return sorted(WIRE_REFUSED_OPTIONS.intersection(self.options))

    @property
    def client_choice(self) -> ClientChoice:
        """`auto` resolved: the wire client exactly when `client: openai-compatible` would be
        accepted (an `openai/` model, no option only LiteLLM understands)."""
        if self.client is not ModelClient.AUTO:
            return ClientChoice(self.client, f"client: {self.client.value} is set")
        if not self.model.startswith(WIRE_MODEL_PREFIX):
            return ClientChoice(
                ModelClient.LITELLM, f"auto: {self.model} is not an {WIRE_MODEL_PREFIX} model"
            )
        if refused := self.wire_refused_options:
            return ClientChoice(
                ModelClient.LITELLM,
                f"auto: options name {', '.join(refused)}, which only LiteLLM takes",
            )
        return ClientChoice(
            ModelClient.OPENAI_COMPATIBLE,
            f"auto: an {WIRE_MODEL_PREFIX} model with no LiteLLM-only options",
        )

    @model_validator(mode="after")
    def _wire_can_send_it(self) -> ModelProfile:
        if self.client is not ModelClient.OPENAI_COMPATIBLE:
            return self
        if not self.model.startswith(WIRE_MODEL_PREFIX):
            raise ValueError(
                "client openai-compatible needs an openai/ model reference "
                f"(openai/<the name the server knows>), not {self.model!r}"
            )
        refused = self.wire_refused_options
        if refused:
            raise ValueError(
                f"client openai-compatible sends options as request fields; {', '.join(refused)} "
                "are LiteLLM settings or fields kelpie sets itself: remove them or use "
                "client: litellm"
            )
        return self


class ModelsConfig(_Strict):
    active: str = "default"
    profiles: dict[str, ModelProfile] = Field(min_length=1)

    @model_validator(mode="after")
    def _active_exists(self) -> ModelsConfig:
        if self.active not in self.profiles:
            raise ValueError(
                f'active "{self.active}" is not a profile ({", ".join(self.profiles)})'
            )
        return self

    @property
    def active_profile(self) -> ModelProfile:
        return self.profiles[self.active]


class Thinking(StrEnum):
    NONE = "none"
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"


class AgentConfig(_Strict):
    max_iterations: int | None = Field(default=None, ge=1, le=MAX_ITERATIONS_CEILING)
    tool_timeout_s: float = Field(default=300, gt=0)
    history_messages: int = Field(default=100, ge=1)
    # Long threads (#32): history reloaded by the tier's character budget; older rounds
    # replaced in the request by kelpie's note (decisions verbatim + a summary made by this
    # profile, the low tier; null: the active profile). false: the fixed message count.
    compact_history: bool = True
    summary_profile: str | None = None
    thinking: Thinking = Thinking.NONE
    rules: str = ""
    llm_retries: int = Field(default=2, ge=0, le=10)
    llm_retry_delay_s: float = Field(default=1.0, ge=0)
    # Turns that run at once; more wait (fairly by channel), their threads saying so.
    max_concurrent_turns: int = Field(default=8, ge=1)
    # Threads one person, or one channel, keeps busy at once; past that, a new question is
    # told to wait for one to finish (null: no cap). On by default for people: with no cap,
    # one person's burst holds every slot and queues ahead of a colleague's question.
    max_turns_per_person: int | None = Field(default=2, ge=1)
    max_turns_per_channel: int | None = Field(default=None, ge=1)
    # After an approved write ran, its effect is followed this long (rollout, pod, node,
    # the role's SLI), then the thread hears "Recovered:" or "Not recovered:" (0: off).
    verify_s: float = Field(default=300, ge=0)


class Approvers(_Strict):
    users: list[str] = Field(default_factory=list)
    usergroups: list[str] = Field(default_factory=list)


class ApprovalConfig(_Strict):
    approvers: Approvers = Approvers()
    allow_requester: bool = False
    timeout_s: float = Field(default=300, gt=0)


def _tool_pattern(pattern: str) -> str:
    if pattern == "*":
        return pattern
    kind, _, name = pattern.partition("/")
    if kind == MCP_PATTERN_KIND:
        return _mcp_tool_pattern(pattern, name)
    if not name:
        raise ValueError(f'"{pattern}" must look like <kind>/<name>, e.g. read/*')
    if kind != "*" and kind not in TOOL_KINDS:
        raise ValueError(f'unknown kind "{kind}" ({", ".join(TOOL_KINDS)})')
    return pattern


ToolPattern = Annotated[str, AfterValidator(_tool_pattern)]


class ImpersonateConfig(_Strict):
    """The Kubernetes identity a role's calls act as (Impersonate-User / -Group headers)."""

    user: str = Field(min_length=1)
    groups: list[str] = Field(default_factory=list)


class RoleKubernetesConfig(_Strict):
    impersonate: ImpersonateConfig | None = None


class RoleObservability(_Strict):
    # Series without a namespace label (nodes, cluster totals): only where a role says so.
    cluster_metrics: bool = False


class SliConfig(_Strict):
    """A PromQL query (scoped to the role's namespaces) whose value must be below
    `healthy_below` once a change settled, e.g. an error ratio."""

    query: str = Field(min_length=1)
    healthy_below: float


class NamespaceVerifyConfig(_Strict):
    sli: SliConfig


class VerifyConfig(_Strict):
    sli: SliConfig | None = None
    # A namespace's own SLI (keys: names or globs, an exact name first): after a write in
    # a matching namespace it replaces the role's, and is read from that namespace only.
    namespaces: dict[str, NamespaceVerifyConfig] = Field(default_factory=dict)


class RoleConfig(_Strict):
    tools: list[ToolPattern]
    namespaces: list[str] = Field(default_factory=lambda: ["*"])
    approval: ApprovalConfig = ApprovalConfig()
    # With `impersonate`, the cluster's RBAC for that identity applies too.
    kubernetes: RoleKubernetesConfig = RoleKubernetesConfig()
    observability: RoleObservability = RoleObservability()
    # What "recovered" also means after a write of this role (`agent.verify_s`).
    verify: VerifyConfig = VerifyConfig()
    # The runbooks (ids, fnmatch patterns) this role may list, read and be offered.
    runbooks: list[str] = Field(default_factory=lambda: ["*"])


class ChannelMatch(_Strict):
    id: str | None = None
    name: str | None = None
    im: bool | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> ChannelMatch:
        given = [k for k in ("id", "name", "im") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("match needs exactly one of id, name or im")
        return self


class ChannelConfig(_Strict):
    match: ChannelMatch
    role: str
    cluster: str | None = None
    namespace: str | None = None


# A custom (or any group's) kind written `Kind.group`, e.g. `Gadget.example.com`.
_QUALIFIED_KIND = re.compile(r"[A-Z][A-Za-z0-9]{0,62}\.[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")


def _kubernetes_kind(kind: str) -> str:
    if _QUALIFIED_KIND.fullmatch(kind):
        return kind
    if kind.lower() not in _KINDS_LOWER:
        # A near miss of a built-in kind is a typo; anything else may be a custom kind.
        hint = _did_you_mean(kind, KUBERNETES_KINDS) or (
            "; write another group's kind as Kind.group, e.g. Gadget.example.com"
        )
        raise ValueError(f'"{kind}" is not a built-in Kubernetes kind{hint}')
    return kind


KubernetesKind = Annotated[str, AfterValidator(_kubernetes_kind)]


class FirewallConfig(_Strict):
    deny_namespaces: list[str] = Field(default_factory=lambda: ["kube-system"])
    deny_kinds: list[KubernetesKind] = Field(default_factory=lambda: ["Secret"])
    deny_names: list[str] = Field(default_factory=list)


class GuardianConfig(_Strict):
    enabled: bool = False
    model_profile: str = "default"


class HookConfig(_Strict):
    match: str = "*"
    command: list[str] = Field(min_length=1)
    timeout_s: float = Field(default=10, gt=0)


class HooksConfig(_Strict):
    pre_tool_use: list[HookConfig] = Field(default_factory=list)
    post_tool_use: list[HookConfig] = Field(default_factory=list)
    session_start: list[HookConfig] = Field(default_factory=list)
    session_end: list[HookConfig] = Field(default_factory=list)


class TlsConfig(_Strict):
    ca_file: str | None = None
    insecure_skip_verify: bool = False


class ObservabilityInstance(_Strict):
    """One Prometheus, Loki or Alertmanager; a channel's cluster picks the instance."""

    name: str = Field(min_length=1)
    url: str = Field(pattern=r"^https?://")
    cluster: str | None = None
    auth: ModelAuth = ModelAuth()
    # Header name -> the environment variable that holds its whole value (never a literal).
    headers: dict[str, str] = Field(default_factory=dict)
    namespace_label: str = Field(default="namespace", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    timeout_s: float = Field(default=30, gt=0)
    external_url: str | None = None
    tls: TlsConfig = TlsConfig()

    @field_validator("auth")
    @classmethod
    def _no_provider_default(cls, auth: ModelAuth) -> ModelAuth:
        # A model provider's default credential means nothing to Prometheus or Loki.
        if auth.method is AuthMethod.PROVIDER_DEFAULT:
            raise ValueError(
                "auth method provider-default is for model profiles; use none or environment"
            )
        return auth


class ObservabilityConfig(_Strict):
    prometheus: list[ObservabilityInstance] = Field(default_factory=list)
    loki: list[ObservabilityInstance] = Field(default_factory=list)
    alertmanager: list[ObservabilityInstance] = Field(default_factory=list)
    max_window_h: float = Field(default=24, gt=0)
    max_series: int = Field(default=50, ge=1)
    max_silence_h: float = Field(default=4, gt=0)

    def by_kind(self) -> list[tuple[str, list[ObservabilityInstance]]]:
        return [
            ("prometheus", self.prometheus),
            ("loki", self.loki),
            ("alertmanager", self.alertmanager),
        ]

    def instances(self) -> list[tuple[str, ObservabilityInstance]]:
        return [(kind, instance) for kind, listed in self.by_kind() for instance in listed]


class LogFormat(StrEnum):
    TEXT = "text"
    JSON = "json"


class LoggingConfig(_Strict):
    format: LogFormat = LogFormat.TEXT
    level: str = "INFO"

    @field_validator("level")
    @classmethod
    def _known_level(cls, level: str) -> str:
        if level.upper() not in LOG_LEVELS:
            raise ValueError(f'unknown level "{level}" ({", ".join(LOG_LEVELS)})')
        return level.upper()


class ListenConfig(_Strict):
    host: str = "0.0.0.0"
    port: int = Field(default=8080, ge=0, le=65535)


class HealthConfig(ListenConfig):
    # Loopback unless exposed on purpose: `/metrics` and the probes have no auth. Probes
    # from the kubelet need the pod IP, so the deploy/ manifests set 0.0.0.0.
    host: str = "127.0.0.1"
    enabled: bool = True


class ServerConfig(_Strict):
    health: HealthConfig = HealthConfig()
    # The alert receivers' listener: its own host and port (None: on the Slack HTTP
    # listener, which HTTP mode needs then).
    alerts: ListenConfig | None = None
    # kelpie's MCP server for other agents (streamable HTTP at `/mcp`; None: not served).
    mcp: ListenConfig | None = None


class ReceiverType(StrEnum):
    ALERTMANAGER = "alertmanager"
    GRAFANA = "grafana"


class ReceiverAuthMethod(StrEnum):
    BEARER = "bearer"
    BASIC = "basic"


class ReceiverAuth(_Strict):
    """How a webhook proves itself (Alertmanager's `http_config`): a bearer token, or basic
    auth, each read from the environment at startup (never a literal)."""

    method: ReceiverAuthMethod
    token_env: str | None = None
    username_env: str | None = None
    password_env: str | None = None

    @model_validator(mode="after")
    def _envs_for_method(self) -> ReceiverAuth:
        if self.method is ReceiverAuthMethod.BEARER and not self.token_env:
            raise ValueError("bearer auth needs token_env")
        if self.method is ReceiverAuthMethod.BASIC and not (
            self.username_env and self.password_env
        ):
            raise ValueError("basic auth needs username_env and password_env")
        return self

    def envs(self) -> list[tuple[str, str]]:
        """(environment variable, its key) the method needs."""
        if self.method is ReceiverAuthMethod.BEARER:
            return [(self.token_env or "", "token_env")]
        return [
            (self.username_env or "", "username_env"),
            (self.password_env or "", "password_env"),
        ]


class AlertReceiver(_Strict):
    type: ReceiverType
    auth: ReceiverAuth
    # Bodies over this get 413 (Alertmanager's 200-alert notification is ~200 KB).
    max_body_bytes: int = Field(default=2_000_000, ge=1024)


def _re2_valid(pattern: str) -> str:
    try:
        re2.compile(f"(?:{pattern})")
    except re2.error as error:
        raise ValueError(f"invalid regular expression {pattern!r}: {error}") from None
    return pattern


class AlertRoute(_Strict):
    """First match wins: every `match` label equal, every `match_re` label matching whole."""

    match: dict[str, str] = Field(default_factory=dict)
    match_re: dict[str, str] = Field(default_factory=dict)
    channel: str = Field(pattern=r"^[CG][A-Z0-9]+$")
    investigate: bool = True
    instruction: str | None = None

    @field_validator("match_re")
    @classmethod
    def _patterns(cls, patterns: dict[str, str]) -> dict[str, str]:
        for pattern in patterns.values():
            _re2_valid(pattern)
        return patterns


class AlertWatch(_Strict):
    """A channel where an alerting app or bot already posts: kelpie investigates in the thread
    of each of its top-level messages there (by bot or app id; `text_re`, when given, must
    match the message's text whole, as an RE2 where `.` also matches a line break)."""

    channel: str = Field(pattern=r"^[CG][A-Z0-9]+$")
    bot_ids: list[Annotated[str, Field(pattern=r"^B[A-Z0-9]+$")]] = Field(default_factory=list)
    app_ids: list[Annotated[str, Field(pattern=r"^A[A-Z0-9]+$")]] = Field(default_factory=list)
    text_re: str | None = None
    instruction: str | None = None

    @field_validator("text_re")
    @classmethod
    def _pattern(cls, pattern: str | None) -> str | None:
        return _re2_valid(pattern) if pattern is not None else None

    @model_validator(mode="after")
    def _someone(self) -> AlertWatch:
        if not (self.bot_ids or self.app_ids):
            raise ValueError("a watched channel needs bot_ids or app_ids (whose messages)")
        return self


class AlertsConfig(_Strict):
    receivers: list[AlertReceiver] = Field(default_factory=list)
    routes: list[AlertRoute] = Field(default_factory=list)
    # Channels where an alerting app already posts (one entry per channel).
    watch: list[AlertWatch] = Field(default_factory=list)
    max_investigations_per_hour: int = Field(default=10, ge=0)
    # A group resolved and firing again within this reuses its thread.
    reopen_s: float = Field(default=3600, ge=0)

    @field_validator("receivers")
    @classmethod
    def _one_per_type(cls, receivers: list[AlertReceiver]) -> list[AlertReceiver]:
        types = [receiver.type for receiver in receivers]
        if len(types) != len(set(types)):
            raise ValueError("one receiver per type (each has its own path)")
        return receivers

    @field_validator("watch")
    @classmethod
    def _one_per_channel(cls, watch: list[AlertWatch]) -> list[AlertWatch]:
        channels = [entry.channel for entry in watch]
        if len(channels) != len(set(channels)):
            raise ValueError("one alerts.watch entry per channel")
        return watch


# --- MCP servers whose tools kelpie offers (the client side: `mcp.servers`) ---

# Roles name an MCP server's tool `mcp/<server>/<tool>` (`mcp/grafana/*` for all of them).
MCP_PATTERN_KIND = "mcp"
_MCP_SERVER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,31}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _mcp_tool_pattern(pattern: str, name: str) -> str:
    server, slash, tool = name.partition("/")
    if not server or not slash or not tool:
        raise ValueError(f'"{pattern}" must look like mcp/<server>/<tool>, e.g. mcp/grafana/*')
    return pattern


def _env_names(names: dict[str, str]) -> dict[str, str]:
    for key, env in names.items():
        if not _ENV_NAME.fullmatch(env):
            raise ValueError(
                f'{key}: "{env}" is not an environment variable name (the value names the '
                "variable that holds it, never the value itself)"
            )
    return names


EnvNames = Annotated[dict[str, str], AfterValidator(_env_names)]


class McpTransport(StrEnum):
    HTTP = "streamable-http"
    STDIO = "stdio"


class McpServerConfig(_Strict):
    """One MCP server: streamable HTTP (`url`, `headers`) or stdio (`command`, `args`,
    `env`). Its tools are reads where `read` matches their name, writes otherwise."""

    url: str | None = Field(default=None, pattern=r"^https?://")
    # Header name -> the environment variable that holds its whole value (never a literal).
    headers: EnvNames = Field(default_factory=dict)
    command: str | None = Field(default=None, min_length=1)
    args: list[str] = Field(default_factory=list)
    # The server process's variable -> the environment variable of kelpie that holds it.
    env: EnvNames = Field(default_factory=dict)
    timeout_s: float = Field(default=30, gt=0)
    # Tool-name patterns (fnmatch) of the read tools; every other tool is a write.
    read: list[str] = Field(default_factory=list)
    # How often the tool list is read again (besides the server's list-changed events).
    relist_s: float = Field(default=300, gt=0)

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if (self.url is None) == (self.command is None):
            raise ValueError("set either url (streamable HTTP) or command (stdio)")
        if self.url is not None and (self.args or self.env):
            raise ValueError("args and env are for a stdio server (command)")
        if self.command is not None and self.headers:
            raise ValueError("headers are for a streamable HTTP server (url)")
        return self

    @property
    def transport(self) -> McpTransport:
        return McpTransport.HTTP if self.url is not None else McpTransport.STDIO


def _server_names(servers: dict[str, McpServerConfig]) -> dict[str, McpServerConfig]:
    for name in servers:
        if not _MCP_SERVER_NAME.fullmatch(name):
            raise ValueError(
                f'server name "{name}": letters, digits and - (at most 32): its tools are '
                "named mcp_<server>_<tool>"
            )
    return servers


class McpServersConfig(_Strict):
    """The client side of MCP (`mcp.servers`): the servers whose tools kelpie offers."""

    servers: Annotated[dict[str, McpServerConfig], AfterValidator(_server_names)] = Field(
        default_factory=dict
    )


class McpClientConfig(_Strict):
    """One caller of kelpie's MCP server: its bearer token (read from `token_env`), the one
    role it gets, the cluster it works on and the Slack channel where its writes are
    approved (None: its role's writes are not offered)."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,62}$")
    token_env: str
    role: str
    cluster: str | None = None
    approval_channel: str | None = Field(default=None, pattern=r"^[CG][A-Z0-9]+$")


class McpClientsConfig(_Strict):
    """`mcp.clients`: who may call kelpie's MCP server (`server.mcp`, `kelpie mcp serve`)."""

    clients: list[McpClientConfig] = Field(default_factory=list)

    @field_validator("clients")
    @classmethod
    def _unique(cls, clients: list[McpClientConfig]) -> list[McpClientConfig]:
        names = [client.name for client in clients]
        if len(names) != len(set(names)):
            raise ValueError("each MCP client needs its own name")
        envs = [client.token_env for client in clients]
        if len(envs) != len(set(envs)):
            raise ValueError("each MCP client needs its own token_env (a token names one client)")
        return clients


NO_ROLE = "none"


class McpConfig(McpServersConfig, McpClientsConfig):
    """The `mcp` section: the servers kelpie calls and the clients that call kelpie."""


class RunbooksConfig(_Strict):
    """Where the team's runbooks are: a folder of Markdown files and/or a ConfigMap
    ("namespace/name", one key per file) read with kelpie's own identity."""

    path: str | None = None
    configmap: str | None = Field(
        default=None, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?/[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
    )
    # The cluster the ConfigMap is read from (default: the first configured).
    cluster: str | None = None
    # How long a loaded set of runbooks is used before it is read again.
    reload_s: float = Field(default=60, ge=0)


class MemoryConfig(_Strict):
    """Incidents a person confirmed: offered after a resolution, stored on a click."""

    enabled: bool = True
    # The model profile that proposes the memory (default: a low-tier profile, else the
    # active one).
    model_profile: str | None = None


class KnowledgeConfig(_Strict):
    runbooks: RunbooksConfig = RunbooksConfig()
    memory: MemoryConfig = MemoryConfig()


class Config(_Strict):
    slack: SlackConfig = SlackConfig()
    database: DatabaseConfig = DatabaseConfig()
    store: StoreConfig = StoreConfig()
    kubernetes: KubernetesConfig
    models: ModelsConfig
    agent: AgentConfig = AgentConfig()
    roles: dict[str, RoleConfig] = Field(default_factory=dict)
    channels: list[ChannelConfig] = Field(default_factory=list)
    default_role: str = NO_ROLE
    firewall: FirewallConfig = FirewallConfig()
    guardian: GuardianConfig = GuardianConfig()
    hooks: HooksConfig = HooksConfig()
    observability: ObservabilityConfig = ObservabilityConfig()
    logging: LoggingConfig = LoggingConfig()
    server: ServerConfig = ServerConfig()
    alerts: AlertsConfig = AlertsConfig()
    mcp: McpConfig = McpConfig()
    knowledge: KnowledgeConfig = KnowledgeConfig()

    @model_validator(mode="after")
    def _alerts_listener(self) -> Config:
        # Socket mode has no listener of its own to share.
        if self.alerts.receivers and self.server.alerts is None:
            if self.slack.mode is SlackMode.SOCKET:
                raise ValueError("alerts.receivers need server.alerts (host, port) in socket mode")
        return self

    # The names sections give each other are checked by `parse_config`
    # (`reference_problems`), alongside the schema: not here, where a schema mistake
    # anywhere would hide them.


def _mapping(data: Any, key: str) -> dict[str, Any]:
    value = data.get(key) if isinstance(data, dict) else None
    return value if isinstance(value, dict) else {}


def _names(items: Any) -> list[str] | None:
    """The `name` of each mapping in a raw list (None: not a list, nothing to check)."""
    if not isinstance(items, list):
        return None
    return [str(item["name"]) for item in items if isinstance(item, dict) and "name" in item]


def valid_roles(data: dict[str, Any]) -> dict[str, RoleConfig]:
    """The roles of a raw config that the schema accepts, each on its own."""
    roles: dict[str, RoleConfig] = {}
    for name, raw in _mapping(data, "roles").items():
        try:
            roles[str(name)] = RoleConfig.model_validate(raw)
        except ValidationError:
            continue  # the schema's own pass names what is wrong with it
    return roles


def reference_problems(data: dict[str, Any]) -> list[str]:
    """Names one part of the config gives another that do not exist (a channel's role or
    cluster, the default role, the guardian's profile). Read from the raw mapping, with the
    schema's defaults, so they are reported in the same pass as schema mistakes: a section
    the schema refuses still has the names it defines."""
    roles = _mapping(data, "roles")
    role_names = ", ".join(roles) or "no roles defined"
    problems: list[str] = []
    default_role = data.get("default_role", NO_ROLE)
    if isinstance(default_role, str) and default_role != NO_ROLE and default_role not in roles:
        problems.append(f'default_role: unknown role "{default_role}" ({role_names}, none)')
    external = _mapping(data, "slack").get("external_users_role", NO_ROLE)
    if isinstance(external, str) and external != NO_ROLE and external not in roles:
        problems.append(
            f'slack.external_users_role: unknown role "{external}" ({role_names}, none)'
        )
    clusters = _names(_mapping(data, "kubernetes").get("clusters"))
    channels = data.get("channels")
    for i, channel in enumerate(channels if isinstance(channels, list) else []):
        if not isinstance(channel, dict):
            continue
        role, cluster = channel.get("role"), channel.get("cluster")
        if role != NO_ROLE:
            problems += _unknown(f"channels[{i}].role", "role", role, roles, role_names)
        problems += _unknown_cluster(f"channels[{i}].cluster", cluster, clusters)
    guardian = _mapping(data, "guardian")
    profile = guardian.get("model_profile", GuardianConfig().model_profile)
    profiles = _mapping(_mapping(data, "models"), "profiles")
    if guardian.get("enabled") is True and isinstance(profile, str) and profile not in profiles:
        problems.append(f'guardian.model_profile: unknown profile "{profile}"')
    problems += _observability_references(_mapping(data, "observability"), clusters)
    summary = _mapping(data, "agent").get("summary_profile")
    problems += _unknown("agent.summary_profile", "profile", summary, profiles)
    problems += _mcp_references(data)
    problems += _mcp_client_references(_mapping(data, "mcp"), role_names, roles, clusters)
    problems += _knowledge_references(_mapping(data, "knowledge"), clusters, list(profiles))
    return problems


def _mcp_references(data: dict[str, Any]) -> list[str]:
    """Role patterns `mcp/<server>/...` naming a server `mcp.servers` does not define."""
    servers = list(_mapping(_mapping(data, "mcp"), "servers"))
    problems: list[str] = []
    for role, raw in _mapping(data, "roles").items():
        tools = raw.get("tools") if isinstance(raw, dict) else None
        for i, pattern in enumerate(tools if isinstance(tools, list) else []):
            if not isinstance(pattern, str) or not pattern.startswith(f"{MCP_PATTERN_KIND}/"):
                continue
            server = pattern.split("/")[1]
            if any(fnmatchcase(name, server) for name in servers):
                continue
            known = ", ".join(servers) or "no mcp.servers defined"
            problems.append(f'roles.{role}.tools[{i}]: "{pattern}" names no MCP server ({known})')
    return problems


def _mcp_client_references(
    data: dict[str, Any], role_names: str, roles: dict[str, Any], clusters: list[str] | None
) -> list[str]:
    """An MCP client's role or cluster that does not exist."""
    problems: list[str] = []
    listed = data.get("clients")
    for i, client in enumerate(listed if isinstance(listed, list) else []):
        if not isinstance(client, dict):
            continue
        role, cluster = client.get("role"), client.get("cluster")
        problems += _unknown(f"mcp.clients[{i}].role", "role", role, roles, role_names)
        problems += _unknown_cluster(f"mcp.clients[{i}].cluster", cluster, clusters)
    return problems


def _knowledge_references(
    data: dict[str, Any], clusters: list[str] | None, profiles: list[str]
) -> list[str]:
    cluster = _mapping(data, "runbooks").get("cluster")
    profile = _mapping(data, "memory").get("model_profile")
    return [
        *_unknown_cluster("knowledge.runbooks.cluster", cluster, clusters),
        *_unknown("knowledge.memory.model_profile", "profile", profile, profiles),
    ]


def _observability_references(data: dict[str, Any], clusters: list[str] | None) -> list[str]:
    """Instances named twice in one kind, or belonging to a cluster that does not exist."""
    problems: list[str] = []
    for kind in ("prometheus", "loki", "alertmanager"):
        listed = data.get(kind)
        names: list[str] = []
        for instance in listed if isinstance(listed, list) else []:
            if not isinstance(instance, dict) or not isinstance(instance.get("name"), str):
                continue
            where = f'observability.{kind} "{instance["name"]}"'
            if instance["name"] in names:
                problems.append(f"{where}: the name is used twice; names are unique per kind")
            names.append(instance["name"])
            problems += _unknown_cluster(f"{where}.cluster", instance.get("cluster"), clusters)
    return problems


def _unknown(
    where: str, what: str, name: object, known: Iterable[str], listed: str | None = None
) -> list[str]:
    """One sentence when `name` (a string the config gave) names no `what` in `known`;
    `listed` ends it with what exists."""
    if not isinstance(name, str) or name in known:
        return []
    return [f'{where}: unknown {what} "{name}"' + (f" ({listed})" if listed else "")]


def _unknown_cluster(where: str, name: object, clusters: list[str] | None) -> list[str]:
    # None: the clusters section itself is malformed (the schema's pass says so).
    if clusters is None:
        return []
    return _unknown(where, "cluster", name, clusters, ", ".join(clusters))


def _key_path(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part.startswith(("function-", "value_error")):
            continue
        else:
            path += f".{part}" if path else part
    return path or "(top level)"


def _unwrap(annotation: Any) -> Any:
    """`X | None` → X; anything else as it is."""
    if get_origin(annotation) in (Union, UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def _model_at(loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    """The config section a key path points into (through lists and dicts), if any."""
    current: Any = Config
    for part in loc:
        current = _unwrap(current)
        if isinstance(current, type) and issubclass(current, BaseModel):
            field = current.model_fields.get(str(part))
            if field is None:
                return None
            current = field.annotation
        elif get_origin(current) in (list, dict):
            current = get_args(current)[-1]  # the item type; `part` is an index or a key
        else:
            return None
    current = _unwrap(current)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _unknown_key(loc: tuple[int | str, ...]) -> str:
    model = _model_at(loc[:-1])
    known = list(model.model_fields) if model is not None else []
    hint = _did_you_mean(str(loc[-1]), known)
    if not hint and known:
        hint = f" (known keys: {', '.join(known)})"
    return f"unknown key{hint}"


def _problems(error: ValidationError) -> list[str]:
    problems: list[str] = []
    for item in error.errors():
        message = str(item["msg"]).removeprefix("Value error, ")
        path = _key_path(tuple(item["loc"]))
        if item["type"] == "extra_forbidden":
            message = _unknown_key(tuple(item["loc"]))
        elif item["type"] == "missing":
            message = "is required"
        problems += [f"{path}: {line}" for line in message.split("\n")]
    return problems


# A check of the raw config beyond the schema (`kelpie config check`: the role tool names).
ConfigCheck = Callable[[dict[str, Any]], list[str]]


def parse_config(data: Any, also: ConfigCheck | None = None) -> Config:
    """The config, or one `ConfigError` naming every schema and cross-reference mistake
    (and `also`'s) at once."""
    if not isinstance(data, dict):
        raise ConfigError(["(top level): the config must be a YAML mapping of sections"])
    problems = reference_problems(data) + (also(data) if also is not None else [])
    try:
        config = Config.model_validate(data)
    except ValidationError as error:
        raise ConfigError(_problems(error) + problems) from None
    if problems:
        raise ConfigError(problems)
    return config


def load_config(path: Path, also: ConfigCheck | None = None) -> Config:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigError([f"{path}: cannot read the config file ({error.strerror})"]) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise ConfigError([f"{path}{where}: not valid YAML"]) from None
    return parse_config(data, also)


def resolve_config_path(cli_value: str | None) -> Path:
    return Path(cli_value or os.environ.get("KELPIE_CONFIG") or "config/kelpie.yaml")


class Secrets:
    """Reads the secrets a config names from the environment, and never logs them."""

    def __init__(self, config: Config, environ: dict[str, str] | None = None) -> None:
        self._config = config
        self._environ = dict(os.environ if environ is None else environ)

    def _need(self, env: str, key_path: str) -> str:
        value = self._environ.get(env, "")
        if not value:
            raise ConfigError([f"{key_path}: environment variable {env} is not set"])
        return value

    @property
    def bot_token(self) -> str:
        return self._need(self._config.slack.bot_token_env, "slack.bot_token_env")

    @property
    def app_token(self) -> str:
        return self._need(self._config.slack.app_token_env, "slack.app_token_env")

    @property
    def signing_secret(self) -> str:
        return self._need(self._config.slack.signing_secret_env, "slack.signing_secret_env")

    @property
    def config_token(self) -> str | None:
        """The optional app configuration token (`kelpie check` only)."""
        return self._environ.get(self._config.slack.config_token_env) or None

    def model_api_key(self, profile_name: str) -> str | None:
        auth = self._config.models.profiles[profile_name].auth
        if auth.method is AuthMethod.ENVIRONMENT and auth.env:
            return self._need(auth.env, f"models.profiles.{profile_name}.auth.env")
        return None

    def observability_headers(
        self, kind: str, index: int, instance: ObservabilityInstance
    ) -> dict[str, str]:
        """The headers sent to one Prometheus/Loki/Alertmanager: `auth: environment` as a
        bearer token, each of `headers` from the variable it names (the whole value)."""
        headers: dict[str, str] = {}
        for name, env, path in _observability_env(kind, index, instance):
            value = self._need(env, path)
            headers[name] = f"Bearer {value}" if path.endswith(".auth.env") else value
        return headers

    def receiver_credentials(self, index: int) -> tuple[str, ...]:
        """An alert receiver's secret values (the token, or the user name and password)."""
        receiver = self._config.alerts.receivers[index]
        path = f"alerts.receivers[{index}].auth"
        return tuple(self._need(env, f"{path}.{key}") for env, key in receiver.auth.envs())

    def mcp_client_token(self, index: int) -> str:
        """An MCP client's bearer token (`mcp.clients[index].token_env`)."""
        client = self._config.mcp.clients[index]
        return self._need(client.token_env, f"mcp.clients[{index}].token_env")

    def check_all(self) -> list[str]:
        """Every missing secret, one line each, for startup and `kelpie check`."""
        problems: list[str] = []
        needed: list[tuple[str, str]] = [(self._config.slack.bot_token_env, "slack.bot_token_env")]
        if self._config.slack.mode is SlackMode.SOCKET:
            needed.append((self._config.slack.app_token_env, "slack.app_token_env"))
        else:
            needed.append((self._config.slack.signing_secret_env, "slack.signing_secret_env"))
        names = {self._config.models.active}
        if self._config.guardian.enabled:
            names.add(self._config.guardian.model_profile)
        if self._config.agent.compact_history and self._config.agent.summary_profile:
            names.add(self._config.agent.summary_profile)
        for name in sorted(names):
            auth = self._config.models.profiles[name].auth
            if auth.method is AuthMethod.ENVIRONMENT and auth.env:
                needed.append((auth.env, f"models.profiles.{name}.auth.env"))
        for kind, listed in self._config.observability.by_kind():
            for index, instance in enumerate(listed):
                found = _observability_env(kind, index, instance)
                needed += [(env, path) for _, env, path in found]
        for index, receiver in enumerate(self._config.alerts.receivers):
            path = f"alerts.receivers[{index}].auth"
            needed += [(env, f"{path}.{key}") for env, key in receiver.auth.envs()]
        needed += _mcp_env(self._config.mcp)
        for index, client in enumerate(self._config.mcp.clients):
            needed.append((client.token_env, f"mcp.clients[{index}].token_env"))
        for env, key_path in needed:
            if not self._environ.get(env):
                problems.append(f"{key_path}: environment variable {env} is not set")
        return problems

    def mcp_values(self, server: str) -> dict[str, str]:
        """An MCP server's headers (HTTP) or process variables (stdio), each read from the
        variable the config names; raises ConfigError naming the first one not set."""
        config = self._config.mcp.servers[server]
        names = config.headers if config.transport is McpTransport.HTTP else config.env
        part = "headers" if config.transport is McpTransport.HTTP else "env"
        return {
            key: self._need(env, f"mcp.servers.{server}.{part}.{key}") for key, env in names.items()
        }


def _mcp_env(section: McpServersConfig) -> list[tuple[str, str]]:
    """(environment variable, key path) for each value the MCP servers need."""
    found: list[tuple[str, str]] = []
    for name, server in section.servers.items():
        found += [(env, f"mcp.servers.{name}.headers.{key}") for key, env in server.headers.items()]
        found += [(env, f"mcp.servers.{name}.env.{key}") for key, env in server.env.items()]
    return found


def _observability_env(
    kind: str, index: int, instance: ObservabilityInstance
) -> list[tuple[str, str, str]]:
    """(header, environment variable, key path) for each secret an instance needs."""
    path = f"observability.{kind}[{index}]"
    found: list[tuple[str, str, str]] = []
    if instance.auth.method is AuthMethod.ENVIRONMENT and instance.auth.env:
        found.append(("Authorization", instance.auth.env, f"{path}.auth.env"))
    found += [(name, env, f"{path}.headers.{name}") for name, env in instance.headers.items()]
    return found


def sqlalchemy_async_url(url: str) -> str:
    """`sqlite:///x.db` → `sqlite+aiosqlite:///x.db`; `postgresql://` → asyncpg."""
    if url.startswith("sqlite:"):
        return "sqlite+aiosqlite:" + url.removeprefix("sqlite:")
    if url.startswith("postgresql://"):
        return "postgresql+asyncpg://" + url.removeprefix("postgresql://")
    return url
