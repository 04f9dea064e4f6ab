"""The operator's command line, run as a subprocess the way a person runs it: config
validation, fail-fast startup against the fake Slack peer, `kelpie check`, the manifest."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.peers.slack_server import CONFIG_TOKEN
from tests.world import MODEL_KEY, World, environ, merge

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Ran:
    code: int
    out: str
    err: str


async def kelpie(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> Ran:
    """`kelpie ARGS` in a child process; the peers keep serving on this event loop meanwhile."""
    child_env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": os.environ.get("HOME", ""),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        **(env or {}),
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot.cli",
        *args,
        cwd=ROOT,
        env=child_env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout)
    assert process.returncode is not None
    return Ran(process.returncode, out.decode(), err.decode())


def write_config(world: World, override: dict[str, Any] | None = None) -> Path:
    path = world.tmp / "kelpie.yaml"
    path.write_text(yaml.safe_dump(merge(world.config_data, override or {})))
    return path


async def test_config_check_reports_every_mistake_at_once_with_a_suggestion(world):
    data = merge(world.config_data, {"slack": {"modee": "http"}})
    data["roles"]["viewer"]["tools"] = ["read/list_pod", "write/list_pods", "read/*"]
    data["firewall"] = {"deny_kinds": ["Secrets", "pod"]}
    data["observability"] = {"prometheus": {"url": "http://prom:9090"}}
    data["agent"] = {"max_turns_per_person": 0, "max_turns_per_channel": "many"}
    # Names one section gives another, reported in the same run as the schema's mistakes.
    data["channels"][1] = {"match": {"id": "C9"}, "role": "admn", "cluster": "staging"}
    data["roles"]["broken"] = {"tools": ["read/*"], "namespaces": "shop"}
    path = world.tmp / "bad.yaml"
    path.write_text(yaml.safe_dump(data))

    ran = await kelpie("config", "check", str(path))

    assert ran.code == 2
    lines = ran.err.splitlines()
    assert 'config: slack.modee: unknown key (did you mean "mode"?)' in lines
    assert (
        'config: firewall.deny_kinds[0]: "Secrets" is not a built-in Kubernetes kind '
        '(did you mean "Secret"?)' in lines
    )
    assert "config: observability.prometheus: Input should be a valid list" in lines
    assert "config: agent.max_turns_per_person: Input should be greater than or equal to 1" in lines
    assert any(line.startswith("config: agent.max_turns_per_channel: ") for line in lines)
    assert any(line.startswith("config: roles.broken.namespaces: ") for line in lines)
    assert (
        'config: channels[1].role: unknown role "admn" (admin, broken, operator, viewer)' in lines
    )
    assert 'config: channels[1].cluster: unknown cluster "staging" (prod)' in lines
    assert 'config: roles.viewer.tools[0]: "read/list_pod" matches no tool' in " ".join(lines)
    assert (
        'config: roles.viewer.tools[1]: "write/list_pods" matches no tool (did you mean '
        '"read/list_pods"?)' in lines
    )
    assert len(lines) == 10, lines


async def test_config_check_names_tools_that_do_not_exist(world):
    data = merge(world.config_data, {})
    data["roles"]["viewer"]["tools"] = ["read/list_pod", "write/list_pods", "read/*"]
    path = world.tmp / "bad.yaml"
    path.write_text(yaml.safe_dump(data))

    ran = await kelpie("config", "check", str(path))

    assert ran.code == 2
    assert ran.err.splitlines() == [
        'config: roles.viewer.tools[0]: "read/list_pod" matches no tool '
        '(did you mean "read/list_pods"?)',
        'config: roles.viewer.tools[1]: "write/list_pods" matches no tool '
        '(did you mean "read/list_pods"?)',
    ]


async def test_config_check_accepts_the_example_and_a_valid_file(world):
    ran = await kelpie("config", "check", str(write_config(world)))
    assert (ran.code, ran.out.strip()) == (0, f"{world.tmp / 'kelpie.yaml'}: valid")
    example = await kelpie("config", "check", "config/kelpie.example.yaml")
    assert example.code == 0, example.err


async def test_version():
    ran = await kelpie("--version")
    assert ran.code == 0
    assert ran.out.startswith("kelpie ") and ran.out.split()[1][0].isdigit()


async def test_run_stops_at_once_on_a_wrong_bot_token(world):
    env = {**environ(world.slack), "SLACK_BOT_TOKEN": "xoxb-revoked"}

    ran = await kelpie("run", "--config", str(write_config(world)), env=env)

    assert ran.code == 1
    assert ran.err.strip() == (
        "kelpie: slack bot token (auth.test): slack.bot_token_env: Slack rejected the token in "
        "SLACK_BOT_TOKEN (invalid_auth); set it to the app's Bot User OAuth Token (xoxb-…, "
        "OAuth & Permissions)"
    )
    assert world.slack.calls_to("auth.test")[0].token == "xoxb-revoked"
    assert world.slack.connection_count == 0


async def test_run_stops_at_once_on_a_wrong_app_token(world):
    env = {**environ(world.slack), "SLACK_APP_TOKEN": "xapp-wrong"}

    ran = await kelpie("run", "--config", str(write_config(world)), env=env)

    assert ran.code == 1
    assert "SLACK_APP_TOKEN (invalid_auth)" in ran.err
    assert len(ran.err.strip().splitlines()) == 1
    assert "Traceback" not in ran.err
    assert world.slack.connection_count == 0


async def test_run_names_a_missing_secret_and_exits_2(world):
    env = environ(world.slack)
    del env["SLACK_APP_TOKEN"]

    ran = await kelpie("run", "--config", str(write_config(world)), env=env)

    assert ran.code == 2
    assert ran.err.strip() == (
        "config: slack.app_token_env: environment variable SLACK_APP_TOKEN is not set"
    )
    assert world.slack.calls == [] or world.slack.calls_to("apps.connections.open") == []


async def test_run_stops_on_an_unreadable_kubeconfig_and_an_unopenable_database(world):
    blocker = world.tmp / "not-a-dir"
    blocker.write_text("a file where the database directory should be")
    path = write_config(
        world,
        {
            "database": {"url": f"sqlite:///{blocker}/kelpie.db"},
            "kubernetes": {"clusters": [{"name": "prod", "kubeconfig": "/nonexistent/kc"}]},
        },
    )

    ran = await kelpie("run", "--config", str(path), env=environ(world.slack))

    assert ran.code == 1
    lines = ran.err.strip().splitlines()
    assert len(lines) == 2, ran.err
    assert lines[0].startswith("kelpie: database: database.url: cannot open")
    assert lines[1].startswith("kelpie: kubernetes: kubernetes cluster prod: cannot load")
    assert lines[1].endswith("fix kubernetes.clusters")
    assert "Traceback" not in ran.err


async def test_check_reports_each_dependency_and_missing_scopes(world):
    world.slack.granted_scopes.remove("reactions:write")
    world.model.reply_text("OK")

    # Which client each profile uses, and why: one line each (only the active one is asked).
    profiles = {
        "claude": {"model": "anthropic/claude-sonnet-4-20250514"},
        "drops": {"model": "openai/gpt-4o", "options": {"drop_params": True, "top_p": 0.9}},
        "pinned": {"model": "openai/gpt-4o", "client": "litellm"},
    }
    config = write_config(world, {"models": {"profiles": profiles}})

    ran = await kelpie("check", "--config", str(config), env=environ(world.slack))

    assert ran.code == 1
    lines = ran.out.splitlines()
    assert lines[0] == "ok   config: valid"
    assert "ok   slack bot token (auth.test): team " in lines[1]
    assert lines[2] == (
        "FAIL slack scopes: the bot token lacks reactions:write; add them from `kelpie "
        "manifest` (OAuth & Permissions) and reinstall the app"
    )
    assert lines[3] == "ok   slack app token (apps.connections.open): socket mode ready"
    assert lines[4].startswith("ok   database: ")
    assert lines[5].startswith("ok   kubernetes prod (/version): server v")
    # Without a configuration token the events cannot be read: it says so, and how.
    assert lines[6].startswith("ok   slack events: not checked: a bot token cannot read")
    assert lines[6].endswith("set SLACK_CONFIG_TOKEN to an app configuration token")
    assert lines[7:11] == [
        "ok   model client claude: litellm (auto: anthropic/claude-sonnet-4-20250514 is not "
        "an openai/ model)",
        "ok   model client default: openai-compatible (auto: an openai/ model with no "
        "LiteLLM-only options)",
        "ok   model client drops: litellm (auto: options name drop_params, which only "
        "LiteLLM takes)",
        "ok   model client pinned: litellm (client: litellm is set)",
    ]
    assert lines[11] == "ok   model default (openai/test-model): answered a one-token request"
    assert world.model.requests[-1]["max_tokens"] == 1


async def test_check_reads_the_apps_event_subscriptions_with_a_configuration_token(world):
    config = str(write_config(world))
    env = {**environ(world.slack), "SLACK_CONFIG_TOKEN": CONFIG_TOKEN}
    world.model.reply_text("OK")
    ran = await kelpie("check", "--config", config, env=env)
    assert ran.code == 0, ran.out + ran.err
    assert "ok   slack events: all 6 subscribed, agent app" in ran.out.splitlines()

    # The app's configuration lost the stop event and the agent declaration.
    world.slack.session_stop_subscribed = False
    world.slack.agent_view = False
    world.model.reply_text("OK")
    ran = await kelpie("check", "--config", config, env=env)
    assert ran.code == 1
    assert (
        "FAIL slack events: the app lacks agent_session_stopped, features.agent_view (the app "
        "declared as an agent); update it from `kelpie manifest --mode socket` (App Manifest) "
        "and reinstall the app"
    ) in ran.out.splitlines()

    # An expired configuration token is named, with what to do.
    world.model.reply_text("OK")
    ran = await kelpie("check", "--config", config, env={**env, "SLACK_CONFIG_TOKEN": "xoxe-old"})
    assert ran.code == 1
    assert "slack.config_token_env: Slack refused reading the app's manifest" in ran.out
    assert "xoxe-old" not in ran.out + ran.err


async def test_manifest_url_honours_the_configured_events_path(world):
    path = write_config(world, {"slack": {"http": {"path": "/kelpie/events"}}})

    ran = await kelpie("manifest", "--config", str(path), "--url", "https://bot.example.org")
    manifest = yaml.safe_load(ran.out)
    wrong = await kelpie(
        "manifest", "--config", str(path), "--url", "https://bot.example.org/slack/events"
    )

    assert ran.code == 0
    url = "https://bot.example.org/kelpie/events"
    assert manifest["settings"]["event_subscriptions"]["request_url"] == url
    assert manifest["settings"]["interactivity"]["request_url"] == url
    assert manifest["features"]["slash_commands"][0]["url"] == url
    assert manifest["settings"]["socket_mode_enabled"] is False
    assert wrong.code == 2
    assert "differs from slack.http.path /kelpie/events" in wrong.err


async def test_run_names_a_port_that_is_taken(world):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        path = write_config(world, {"server": {"health": {"host": "127.0.0.1", "port": port}}})
        ran = await kelpie("run", "--config", str(path), env=environ(world.slack))
    finally:
        taken.close()

    assert ran.code == 1
    line = ran.err.strip()
    assert line.startswith("kelpie: cannot listen (") and "\n" not in line
    assert f"{port}): address already in use);" in line
    assert line.endswith(
        "pick a free host and port in server.health, server.alerts, server.mcp "
        "(and slack.http in http mode)"
    )


async def test_check_proves_the_openai_compatible_client_too(world):
    """`kelpie check` pings the model through the profile's own client: a one-token request
    on the wire, and the same sentence as through LiteLLM when the key is refused."""
    world.model.reply_text("OK")
    world.model.reply_error(401, "Incorrect API key provided.")
    wire = {"models": {"profiles": {"default": {"client": "openai-compatible"}}}}
    config = str(write_config(world, wire))

    answered = await kelpie("check", "--config", config, env=environ(world.slack))
    refused = await kelpie("check", "--config", config, env=environ(world.slack))

    ok = "ok   model default (openai/test-model): answered a one-token request"
    assert ok in answered.out.splitlines()
    assert (
        "FAIL model default (openai/test-model): The model rejected the API key: check "
        "models.profiles.default.auth. Fix: models.profiles.default"
    ) in refused.out.splitlines()
    first, second = world.model.requests
    assert first == second
    assert first["max_tokens"] == 1 and "stream" not in first
    assert world.model.headers[0]["Authorization"] == f"Bearer {MODEL_KEY}"
