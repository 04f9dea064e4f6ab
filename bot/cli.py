"""`kelpie run | check | chat | manifest`: one console entry point."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys

from bot.config import Config, ConfigError, Secrets, load_config, resolve_config_path
from bot.errors import KelpieError

EXIT_CONFIG = 2


def _setup_logging(default_level: str = "INFO") -> None:
    logging.basicConfig(
        level=os.environ.get("KELPIE_LOG_LEVEL", default_level),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # LiteLLM and the HTTP stacks are chatty at INFO and may echo request details.
    for noisy in ("LiteLLM", "litellm", "httpx", "urllib3", "slack_sdk", "slack_bolt"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def _load(path_arg: str | None) -> Config:
    return load_config(resolve_config_path(path_arg))


def _print_config_problems(error: ConfigError) -> int:
    for problem in error.problems:
        print(f"config: {problem}", file=sys.stderr)
    return EXIT_CONFIG


async def _run(config: Config) -> None:
    from bot.app import build_kelpie

    kelpie = build_kelpie(config, Secrets(config))
    await kelpie.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    logging.getLogger("kelpie").info("kelpie is running; Ctrl-C stops it")
    await stop.wait()
    await kelpie.stop()


def cmd_run(args: argparse.Namespace) -> int:
    _setup_logging()
    try:
        config = _load(args.config)
        missing = Secrets(config).check_all()
        if missing:
            raise ConfigError(missing)
    except ConfigError as error:
        return _print_config_problems(error)
    try:
        asyncio.run(_run(config))
    except KelpieError as error:
        print(f"kelpie: {error}", file=sys.stderr)
        return 1
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    from bot.checks import run_checks

    try:
        config = _load(args.config)
    except ConfigError as error:
        return _print_config_problems(error)
    results = asyncio.run(run_checks(config, Secrets(config)))
    for result in results:
        print(result.line())
    return 0 if all(result.ok for result in results) else 1


def cmd_chat(args: argparse.Namespace) -> int:
    from bot.app import build_terminal
    from bot.terminal import ChannelNotEnabled

    # The log shares the terminal with the conversation: errors only (KELPIE_LOG_LEVEL wins).
    _setup_logging("ERROR")
    try:
        config = _load(args.config)
        channel = args.channel.lstrip("#") if args.channel else None
        chat = build_terminal(config, Secrets(config), channel)
    except ConfigError as error:
        return _print_config_problems(error)
    except ChannelNotEnabled as error:
        print(error, file=sys.stderr)
        return EXIT_CONFIG
    try:
        asyncio.run(chat.run())
    except KelpieError as error:
        print(f"kelpie: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # before the chat's own Ctrl-C handling was in place
        return 130
    return 0


def cmd_manifest(args: argparse.Namespace) -> int:
    from bot.slack.manifest import manifest_yaml

    sys.stdout.write(manifest_yaml(args.mode))
    return 0


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    parser = argparse.ArgumentParser(prog="kelpie", description="Kubernetes chat-ops in Slack")
    commands = parser.add_subparsers(dest="command", required=True)
    for name, handler, help_text in (
        ("run", cmd_run, "start the bot"),
        ("check", cmd_check, "validate the config and check every dependency for real"),
    ):
        sub = commands.add_parser(name, help=help_text)
        sub.add_argument(
            "--config", help="config file (default: $KELPIE_CONFIG or config/kelpie.yaml)"
        )
        sub.set_defaults(handler=handler)
    chat = commands.add_parser(
        "chat", help="talk to kelpie in this terminal (same engine, pipeline and approvals)"
    )
    chat.add_argument(
        "--config", help="config file (default: $KELPIE_CONFIG or config/kelpie.yaml)"
    )
    chat.add_argument(
        "--channel",
        metavar="NAME",
        help="act with the role the config gives this channel (default: the im: true mapping)",
    )
    chat.set_defaults(handler=cmd_chat)
    manifest = commands.add_parser("manifest", help="print the Slack app manifest")
    manifest.add_argument("--mode", choices=["socket", "http"], default="socket")
    manifest.set_defaults(handler=cmd_manifest)
    args = parser.parse_args(argv)
    return int(args.handler(args))


if __name__ == "__main__":
    sys.exit(main())
