"""Each dependency checked for real, one result each, naming the setting and the fix.

`kelpie run` runs the startup checks (Slack tokens, database, clusters) and stops at the
first failure with its sentence; `kelpie check` runs them all, plus the model and the Slack
features, and prints one line each. Nothing here starts the bot.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.config import (
    AlertRoute,
    AlertWatch,
    Config,
    ConfigError,
    McpServerConfig,
    Secrets,
    SlackMode,
)
from bot.model.types import ModelError
from bot.pipeline.roles import ChannelRoles
from bot.slack.manifest import BOT_EVENTS, BOT_SCOPES
from bot.toolsets.knowledge.runbooks import RunbookSource
from bot.toolsets.observe.alertmanager import Alertmanager
from bot.toolsets.observe.http import Endpoint, ObserveError, ObserveHttp
from bot.toolsets.observe.instances import Instances
from bot.toolsets.observe.loki import Loki
from bot.toolsets.observe.prometheus import Prometheus
from bot.toolsets.spec import ToolFailure

if TYPE_CHECKING:
    from bot.toolsets.mcp.connection import McpConnection


@dataclass(frozen=True)
class CheckResult:
    name: str
    ok: bool
    detail: str

    def line(self) -> str:
        return f"{'ok  ' if self.ok else 'FAIL'} {self.name}: {self.detail}"


def _unreachable(config: Config, error: Exception) -> str:
    return (
        f"cannot reach Slack at {config.slack.api_url} ({type(error).__name__}); "
        "check slack.api_url and the network"
    )


async def _auth_test(config: Config, secrets: Secrets) -> list[CheckResult]:
    """auth.test proves the bot token; its `x-oauth-scopes` header lists what it was granted."""
    name = "slack bot token (auth.test)"
    env = config.slack.bot_token_env
    try:
        client = AsyncWebClient(token=secrets.bot_token, base_url=config.slack.api_url)
        auth = await client.auth_test()
    except ConfigError as error:
        return [CheckResult(name, False, f"{error}; set it to the app's Bot User OAuth Token")]
    except SlackApiError as error:
        code = error.response.get("error")
        return [
            CheckResult(
                name,
                False,
                f"slack.bot_token_env: Slack rejected the token in {env} ({code}); set it "
                "to the app's Bot User OAuth Token (xoxb-…, OAuth & Permissions)",
            )
        ]
    except Exception as error:  # connection refused, DNS, TLS
        return [CheckResult(name, False, _unreachable(config, error))]
    results = [CheckResult(name, True, f"team {auth.get('team')}, bot {auth.get('user')}")]
    granted = auth.headers.get("x-oauth-scopes")
    if granted is not None:
        results.append(_scopes(granted))
    return results


def _scopes(granted_header: str) -> CheckResult:
    granted = {scope.strip() for scope in granted_header.split(",")}
    missing = [scope for scope in BOT_SCOPES if scope not in granted]
    if missing:
        return CheckResult(
            "slack scopes",
            False,
            f"the bot token lacks {', '.join(missing)}; add them from `kelpie manifest` "
            "(OAuth & Permissions) and reinstall the app",
        )
    return CheckResult("slack scopes", True, f"all {len(BOT_SCOPES)} granted")


async def _app_token(config: Config, secrets: Secrets) -> CheckResult:
    name = "slack app token (apps.connections.open)"
    env = config.slack.app_token_env
    try:
        app_token = secrets.app_token
        client = AsyncWebClient(token=app_token, base_url=config.slack.api_url)
        await client.apps_connections_open(app_token=app_token)
    except ConfigError as error:
        return CheckResult(name, False, f"{error}; set it to an app-level token (xapp-…)")
    except SlackApiError as error:
        return CheckResult(
            name,
            False,
            f"slack.app_token_env: Slack refused Socket Mode with the token in {env} "
            f"({error.response.get('error')}); set it to an app-level token (xapp-…) with "
            "connections:write and enable Socket Mode",
        )
    except Exception as error:
        return CheckResult(name, False, _unreachable(config, error))
    return CheckResult(name, True, "socket mode ready")


def _signing_secret(secrets: Secrets) -> CheckResult:
    name = "slack signing secret"
    try:
        _ = secrets.signing_secret
    except ConfigError as error:
        return CheckResult(name, False, f"{error}; copy it from Basic Information")
    # Slack offers no call that proves a signing secret; the first signed request does.
    return CheckResult(name, True, "set (Slack verifies it on the first event)")


async def slack_checks(config: Config, secrets: Secrets) -> list[CheckResult]:
    results = await _auth_test(config, secrets)
    if config.slack.mode is SlackMode.SOCKET:
        results.append(await _app_token(config, secrets))
    else:
        results.append(_signing_secret(secrets))
    return results


async def slack_features(config: Config, secrets: Secrets) -> CheckResult:
    """The app's event subscriptions and agent declaration, read from its manifest with an
    app configuration token: a bot token cannot read them, and the only other sign (the
    warning on agents.sessions.setStatus) comes from a real thread while kelpie runs."""
    name = "slack events"
    expected = f"`kelpie manifest --mode {config.slack.mode.value}`"
    token = secrets.config_token
    if token is None:
        return CheckResult(
            name,
            True,
            f"not checked: a bot token cannot read the app's event subscriptions; they must "
            f"match {expected}. Slack's stop button needs the app declared as an agent "
            "(features.agent_view) and the agent_session_stopped event (without them kelpie "
            "works without it and logs what is missing). To check them, set "
            f"{config.slack.config_token_env} to an app configuration token",
        )
    try:
        bot = AsyncWebClient(token=secrets.bot_token, base_url=config.slack.api_url)
        app_id = str((await bot.auth_test()).get("app_id") or "")
        tooling = AsyncWebClient(token=token, base_url=config.slack.api_url)
        exported = (await tooling.apps_manifest_export(app_id=app_id)).get("manifest") or {}
    except ConfigError as error:
        return CheckResult(name, False, str(error))
    except SlackApiError as error:
        return CheckResult(
            name,
            False,
            f"slack.config_token_env: Slack refused reading the app's manifest with the token "
            f"in {config.slack.config_token_env} ({error.response.get('error')}); configuration "
            "tokens expire after 12 hours: create a new one, or unset it to skip this check",
        )
    except Exception as error:
        return CheckResult(name, False, _unreachable(config, error))
    return _manifest_features(exported, expected)


def _manifest_features(exported: dict[str, Any], expected: str) -> CheckResult:
    settings = exported.get("settings") or {}
    subscribed = set((settings.get("event_subscriptions") or {}).get("bot_events") or [])
    missing = [event for event in BOT_EVENTS if event not in subscribed]
    if "agent_view" not in (exported.get("features") or {}):
        missing.append("features.agent_view (the app declared as an agent)")
    if missing:
        return CheckResult(
            "slack events",
            False,
            f"the app lacks {', '.join(missing)}; update it from {expected} (App Manifest) "
            "and reinstall the app",
        )
    return CheckResult("slack events", True, f"all {len(BOT_EVENTS)} subscribed, agent app")


async def cluster_checks(config: Config) -> list[CheckResult]:
    from bot.app import kube_clients

    try:
        clients = kube_clients(config)
    except (ToolFailure, ConfigError) as error:
        return [CheckResult("kubernetes", False, f"{error}; fix kubernetes.clusters")]
    results: list[CheckResult] = []
    try:
        for i, cluster in enumerate(config.kubernetes.clusters):
            name = f"kubernetes {cluster.name} (/version)"
            try:
                version = await clients[cluster.name].server_version()
                results.append(CheckResult(name, True, f"server {version}"))
            except ToolFailure as error:
                fix = f"check kubernetes.clusters[{i}] ({cluster.name}): its kubeconfig"
                results.append(CheckResult(name, False, f"{error} Fix: {fix}"))
    finally:
        clients.close()
    return results


async def model_check(config: Config, secrets: Secrets) -> CheckResult:
    from bot.app import model_gateway

    name = f"model {config.models.active} ({config.models.active_profile.model})"
    try:
        gateway = model_gateway(config, secrets, config.models.active)
        try:
            await gateway.ping()
        finally:
            await gateway.close()
    except ConfigError as error:
        return CheckResult(name, False, str(error))
    except ModelError as error:
        return CheckResult(
            name, False, f"{error.user_message} Fix: models.profiles.{config.models.active}"
        )
    return CheckResult(name, True, "answered a one-token request")


def model_clients(config: Config) -> list[CheckResult]:
    """Which client each profile uses, and why: one line each (nothing is contacted)."""
    results: list[CheckResult] = []
    for name, profile in config.models.profiles.items():
        choice = profile.client_choice
        results.append(
            CheckResult(f"model client {name}", True, f"{choice.client.value} ({choice.why})")
        )
    return results


async def database_check(config: Config) -> CheckResult:
    """The database answers and its schema is not newer than this kelpie (`kelpie run`
    upgrades an older one once the checks pass)."""
    from bot.errors import StoreError
    from bot.store.db import Database

    db: Database | None = None
    try:
        db = Database(config.database.url)
        await db.check()
        return CheckResult("database", True, db.where)
    except StoreError as error:
        return CheckResult("database", False, str(error))
    finally:
        if db is not None:
            await db.close()


async def startup_checks(config: Config, secrets: Secrets) -> list[CheckResult]:
    """What `kelpie run` proves before it connects: a failure stops it."""
    results = await slack_checks(config, secrets)
    results.append(await database_check(config))
    results += await cluster_checks(config)
    return results


async def observability_checks(config: Config, secrets: Secrets) -> list[CheckResult]:
    """Each Prometheus (buildinfo), Loki (/ready) and Alertmanager (status), one line each."""
    if not config.observability.instances():
        return []
    try:
        instances = Instances.from_config(config.observability, secrets)
    except ConfigError as error:
        return [CheckResult("observability", False, str(error))]
    http = ObserveHttp()
    try:
        return [await _observe_check(http, endpoint) for endpoint in instances.endpoints]
    finally:
        await http.close()


async def _observe_check(http: ObserveHttp, endpoint: Endpoint) -> CheckResult:
    name = f"{endpoint.kind} {endpoint.name}"
    where = f" (cluster {endpoint.cluster})" if endpoint.cluster else ""
    client: Prometheus | Loki | Alertmanager
    if endpoint.kind == "prometheus":
        client = Prometheus(http, endpoint, max_window_h=1, max_series=1)
    elif endpoint.kind == "loki":
        client = Loki(http, endpoint, max_window_h=1, max_series=1)
    else:
        client = Alertmanager(http, endpoint, max_silence_h=1)
    try:
        said = await client.ready()
    except ObserveError as error:
        return CheckResult(name, False, f"{error} Fix its url, auth or tls in observability")
    return CheckResult(name, True, f"{said} at {endpoint.url}{where}")


def alert_checks(config: Config, secrets: Secrets) -> list[CheckResult]:
    """Each alert receiver (where it listens, whether its credentials are set) and each
    route (what it matches, the channel and the role that channel gets), one line each."""
    listen = config.server.alerts
    where = f"{listen.host}:{listen.port}" if listen else "the Slack HTTP listener"
    results = []
    for index, receiver in enumerate(config.alerts.receivers):
        name = f"alert receiver {receiver.type.value}"
        try:
            secrets.receiver_credentials(index)
        except ConfigError as error:
            results.append(CheckResult(name, False, "; ".join(error.problems)))
            continue
        method = receiver.auth.method.value
        detail = f"POST {where}/alerts/{receiver.type.value}, {method} auth set"
        results.append(CheckResult(name, True, detail))
    roles = ChannelRoles(config)
    for index, route in enumerate(config.alerts.routes):
        results.append(_route_check(index, route, roles))
    for index, watch in enumerate(config.alerts.watch):
        results.append(_watch_check(index, watch, roles))
    return results


def _watch_check(index: int, watch: AlertWatch, roles: ChannelRoles) -> CheckResult:
    """A watched channel: whose messages, the pattern, the role its investigations get."""
    senders = [f"bots {', '.join(watch.bot_ids)}"] if watch.bot_ids else []
    senders += [f"apps {', '.join(watch.app_ids)}"] if watch.app_ids else []
    matching = f" matching {watch.text_re}" if watch.text_re is not None else ""
    binding = roles.bind(watch.channel, None, False)
    role = f"role {binding.role_name}" if binding else "no role by its id (by name, resolved later)"
    detail = (
        f"{watch.channel} ({role}): messages of {', '.join(senders)}{matching} are investigated "
        "in their thread (kelpie must be a member of the channel; the app subscribed to "
        "message.channels or message.groups)"
    )
    return CheckResult(f"alert watch {index + 1}", True, detail)


def _route_check(index: int, route: AlertRoute, roles: ChannelRoles) -> CheckResult:
    matched = {**route.match, **{k: f"~{v}" for k, v in route.match_re.items()}}
    shown = ", ".join(f"{k}={v}" for k, v in matched.items()) or "every alert"
    binding = roles.bind(route.channel, None, False)
    name = f"alert route {index + 1}"
    if binding is None:
        # A channel matched by name only is bound when an alert comes (its name from Slack).
        detail = f"{shown} -> {route.channel}: no role by its id (by name, resolved later)"
        return CheckResult(name, True, detail)
    investigate = "investigated" if route.investigate else "posted only"
    detail = f"{shown} -> {route.channel} (role {binding.role_name}, {investigate})"
    return CheckResult(name, True, detail)


async def mcp_checks(config: Config, secrets: Secrets) -> list[CheckResult]:
    """Each MCP server (`mcp.servers`): reached and listed, with how many of its tools are
    reads and writes by kelpie's config; one line each, a server that fails included."""
    if not config.mcp.servers:
        return []
    # The MCP SDK only where a server is configured (`kelpie run` runs these checks too).
    from bot.toolsets.mcp.toolset import mcp_toolset

    toolset = mcp_toolset(config.mcp.servers, secrets.mcp_values)
    try:
        await toolset.start()  # every server at once, as at kelpie's start
        return [
            _mcp_result(connection, config.mcp.servers[connection.name])
            for connection in toolset.connections
        ]
    finally:
        await toolset.close()


def _mcp_result(connection: McpConnection, server: McpServerConfig) -> CheckResult:
    from bot.toolsets.mcp.connection import ServerState
    from bot.toolsets.mcp.toolset import is_read

    name = f"mcp server {connection.name}"
    where = server.url if server.url is not None else f"stdio: {server.command}"
    if connection.state is not ServerState.UP:
        fix = f"fix mcp.servers.{connection.name} (url or command, headers or env)"
        return CheckResult(name, False, f"{connection.problem}; {fix}")
    reads = sum(is_read(server, tool.name) for tool in connection.tools)
    writes = len(connection.tools) - reads
    detail = f"reachable at {where}: {len(connection.tools)} tools ({reads} read, {writes} write)"
    return CheckResult(name, True, detail)


def mcp_server_checks(config: Config, secrets: Secrets) -> list[CheckResult]:
    """kelpie's MCP server (where it listens) and each client (its token set, the role it
    gets, where its writes are approved), one line each; nothing when no client is set."""
    clients, listen = config.mcp.clients, config.server.mcp
    if not clients:
        if listen is None:
            return []
        return [CheckResult("mcp server", False, "no mcp.clients: every call would be refused")]
    where = (
        f"streamable HTTP at {listen.host}:{listen.port}/mcp"
        if listen is not None
        else "not served over HTTP (set server.mcp); `kelpie mcp serve --stdio` only"
    )
    results = [CheckResult("mcp server", True, f"{where}, {len(clients)} client(s)")]
    for index, client in enumerate(clients):
        name = f"mcp client {client.name}"
        try:
            secrets.mcp_client_token(index)
        except ConfigError as error:
            results.append(CheckResult(name, False, "; ".join(error.problems)))
            continue
        cluster = client.cluster or config.kubernetes.default_cluster
        writes = (
            f"writes approved in {client.approval_channel}"
            if client.approval_channel
            else "writes not offered (no approval_channel)"
        )
        detail = f"token set, role {client.role} on cluster {cluster}, {writes}"
        results.append(CheckResult(name, True, detail))
    return results


async def runbook_checks(config: Config) -> list[CheckResult]:
    """The runbooks as a turn would load them: how many, or each file that was skipped."""
    import time

    from bot.app import kube_clients

    section = config.knowledge.runbooks
    if not (section.path or section.configmap):
        return []
    clients = kube_clients(config)
    cluster = config.kubernetes.default_cluster
    try:
        shelf = await RunbookSource(section, clients, cluster, time.monotonic).shelf()
    finally:
        clients.close()
    ids = ", ".join(r.id for r in shelf.runbooks) or "none"
    loaded = f"{len(shelf.runbooks)} loaded ({ids})"
    if shelf.problems:
        fix = "; fix knowledge.runbooks or the files"
        return [CheckResult("runbooks", False, f"{loaded}; {'; '.join(shelf.problems)}{fix}")]
    return [CheckResult("runbooks", True, loaded)]


async def run_checks(config: Config, secrets: Secrets) -> list[CheckResult]:
    results = [CheckResult("config", True, "valid")]
    results += await startup_checks(config, secrets)
    results.append(await slack_features(config, secrets))
    results += model_clients(config)
    results.append(await model_check(config, secrets))
    results += await observability_checks(config, secrets)
    results += alert_checks(config, secrets)
    results += await mcp_checks(config, secrets)
    results += mcp_server_checks(config, secrets)
    results += await runbook_checks(config)
    return results
