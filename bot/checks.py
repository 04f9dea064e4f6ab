"""`kelpie check`: each dependency checked for real, one line each, with the fix on failure."""

from __future__ import annotations

from dataclasses import dataclass

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.config import Config, ConfigError, Secrets, SlackMode
from bot.model.types import ModelError
from bot.tools.spec import ToolFailure


@dataclass(frozen=True)
class CheckResult:
    name: str
    ok: bool
    detail: str

    def line(self) -> str:
        return f"{'ok  ' if self.ok else 'FAIL'} {self.name}: {self.detail}"


async def _slack(config: Config, secrets: Secrets) -> list[CheckResult]:
    results: list[CheckResult] = []
    try:
        token = secrets.bot_token
    except ConfigError as error:
        return [CheckResult("slack auth.test", False, f"{error}; set it to the bot's xoxb- token")]
    client = AsyncWebClient(token=token, base_url=config.slack.api_url)
    try:
        auth = await client.auth_test()
        results.append(
            CheckResult("slack auth.test", True, f"team {auth.get('team')}, bot {auth.get('user')}")
        )
    except SlackApiError as error:
        code = error.response.get("error")
        results.append(
            CheckResult(
                "slack auth.test",
                False,
                f"Slack rejected the bot token ({code}); set "
                f"{config.slack.bot_token_env} to the app's Bot User OAuth Token (xoxb-…)",
            )
        )
    except Exception as error:  # connection refused, DNS, TLS
        results.append(
            CheckResult(
                "slack auth.test",
                False,
                f"cannot reach {config.slack.api_url} ({type(error).__name__}); "
                "check slack.api_url and the network",
            )
        )
    if config.slack.mode is SlackMode.SOCKET:
        try:
            app_token = secrets.app_token
            socket = AsyncWebClient(token=app_token, base_url=config.slack.api_url)
            await socket.apps_connections_open(app_token=app_token)
            results.append(CheckResult("slack apps.connections.open", True, "socket mode ready"))
        except ConfigError as error:
            results.append(CheckResult("slack apps.connections.open", False, str(error)))
        except SlackApiError as error:
            results.append(
                CheckResult(
                    "slack apps.connections.open",
                    False,
                    f"Slack refused socket mode ({error.response.get('error')}); set "
                    f"{config.slack.app_token_env} to an app-level token (xapp-…) with "
                    "connections:write, and enable Socket Mode",
                )
            )
        except Exception as error:
            results.append(
                CheckResult(
                    "slack apps.connections.open",
                    False,
                    f"cannot reach Slack ({type(error).__name__}); check slack.api_url",
                )
            )
    else:
        try:
            _ = secrets.signing_secret
            results.append(CheckResult("slack signing secret", True, "set"))
        except ConfigError as error:
            results.append(CheckResult("slack signing secret", False, str(error)))
    return results


async def _clusters(config: Config) -> list[CheckResult]:
    from bot.app import kube_clients

    results: list[CheckResult] = []
    try:
        clients = kube_clients(config)
    except (ToolFailure, ConfigError) as error:
        return [CheckResult("kubernetes", False, str(error))]
    try:
        for cluster in config.kubernetes.clusters:
            name = f"kubernetes {cluster.name} /version"
            try:
                version = await clients[cluster.name].server_version()
                results.append(CheckResult(name, True, f"server {version}"))
            except ToolFailure as error:
                results.append(
                    CheckResult(
                        name,
                        False,
                        f"{error} Check kubernetes.clusters ({cluster.name}) kubeconfig",
                    )
                )
    finally:
        clients.close()
    return results


async def _model(config: Config, secrets: Secrets) -> CheckResult:
    from bot.app import model_gateway

    name = f"model {config.models.active} ({config.models.active_profile.model})"
    try:
        gateway = model_gateway(config, secrets, config.models.active)
        await gateway.ping()
    except ConfigError as error:
        return CheckResult(name, False, str(error))
    except ModelError as error:
        return CheckResult(name, False, error.user_message)
    return CheckResult(name, True, "answered a one-token request")


async def _database(config: Config) -> CheckResult:
    from bot.store.db import Database

    db = Database(config.database.url)
    try:
        await db.ping()
        await db.create_schema()
        return CheckResult("database", True, config.database.url.split("@")[-1])
    except Exception as error:
        return CheckResult(
            "database", False, f"cannot open it ({type(error).__name__}); check database.url"
        )
    finally:
        await db.close()


async def run_checks(config: Config, secrets: Secrets) -> list[CheckResult]:
    results = [CheckResult("config", True, "valid")]
    results += await _slack(config, secrets)
    results += await _clusters(config)
    results.append(await _model(config, secrets))
    results.append(await _database(config))
    return results
