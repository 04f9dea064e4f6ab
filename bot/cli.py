"""`kelpie run | check | chat | manifest | config check`: one console entry point.

Exit codes: 0 fine, 1 a dependency failed (Slack, database, cluster, model), 2 the config
or its secrets are wrong. Every failure is one sentence naming the setting and the fix.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import re
import signal
import sys
from datetime import UTC, datetime, timedelta
from importlib.metadata import PackageNotFoundError, version
from typing import Any
from urllib.parse import urlsplit

from bot.config import Config, ConfigError, Secrets, load_config, resolve_config_path
from bot.errors import KelpieError

EXIT_FAILED = 1
EXIT_CONFIG = 2
CONFIG_HELP = "config file (default: $KELPIE_CONFIG or config/kelpie.yaml)"

log = logging.getLogger("kelpie")


class StartupFailed(KelpieError):
    """A dependency failed its startup check; the message holds one sentence per failure."""


def kelpie_version() -> str:
    try:
        return version("kelpie")
    except PackageNotFoundError:  # running from a checkout that was never installed
        return "unknown"


def _configure_logging(config: Config | None, default_level: str | None = None) -> None:
    from bot.config import LoggingConfig
    from bot.logs import configure

    settings = config.logging if config is not None else LoggingConfig()
    configure(settings, level=os.environ.get("KELPIE_LOG_LEVEL") or default_level)


def _load(path_arg: str | None) -> Config:
    """The config, checked against the schema and against the tools this build has."""
    from bot.app import config_problems

    return load_config(resolve_config_path(path_arg), also=config_problems)


def _print_config_problems(error: ConfigError) -> int:
    for problem in error.problems:
        print(f"config: {problem}", file=sys.stderr)
    return EXIT_CONFIG


async def _verify(config: Config, secrets: Secrets) -> None:
    from bot.checks import startup_checks

    failures = [result for result in await startup_checks(config, secrets) if not result.ok]
    if failures:
        raise StartupFailed("\n".join(f"{r.name}: {r.detail}" for r in failures))


async def _run(config: Config, secrets: Secrets) -> None:
    from bot.app import build_kelpie

    await _verify(config, secrets)
    kelpie = build_kelpie(config, secrets)
    try:
        await kelpie.start(settle_heap=True)
    except OSError as error:  # a port taken or not ours to bind
        await kelpie.stop()
        raise StartupFailed(
            f"cannot listen ({error.strerror or error}); pick a free host and port in "
            "server.health (and slack.http in http mode)"
        ) from error
    except BaseException:
        await kelpie.stop()
        raise
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    log.info("kelpie %s is running; Ctrl-C stops it", kelpie_version())
    await stop.wait()
    await kelpie.stop()


def cmd_run(args: argparse.Namespace) -> int:
    try:
        config = _load(args.config)
        _configure_logging(config)
        secrets = Secrets(config)
        missing = secrets.check_all()
        if missing:
            raise ConfigError(missing)
    except ConfigError as error:
        return _print_config_problems(error)
    try:
        asyncio.run(_run(config, secrets))
    except KelpieError as error:
        for line in error.user_message.splitlines():
            print(f"kelpie: {line}", file=sys.stderr)
        return EXIT_FAILED
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    from bot.checks import run_checks

    try:
        config = _load(args.config)
    except ConfigError as error:
        return _print_config_problems(error)
    _configure_logging(config, "ERROR")
    results = asyncio.run(run_checks(config, Secrets(config)))
    for result in results:
        print(result.line())
    return 0 if all(result.ok for result in results) else EXIT_FAILED


def cmd_config_check(args: argparse.Namespace) -> int:
    path = resolve_config_path(args.file)
    try:
        _load(str(path))
    except ConfigError as error:
        return _print_config_problems(error)
    print(f"{path}: valid")
    return 0


def cmd_chat(args: argparse.Namespace) -> int:
    from bot.app import build_terminal
    from bot.terminal import ChannelNotEnabled

    try:
        config = _load(args.config)
        # The log shares the terminal with the conversation: errors only.
        _configure_logging(config, "ERROR")
        channel = args.channel.lstrip("#") if args.channel else None
        chat = build_terminal(config, Secrets(config), channel, self_approve=args.self_approve)
    except ConfigError as error:
        return _print_config_problems(error)
    except ChannelNotEnabled as error:
        print(error, file=sys.stderr)
        return EXIT_CONFIG
    try:
        asyncio.run(chat.run())
    except KelpieError as error:
        print(f"kelpie: {error.user_message}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:  # before the chat's own Ctrl-C handling was in place
        return 130
    return 0


def _request_url(url: str, events_path: str) -> str:
    """`--url https://host` gets `slack.http.path` appended; a URL with a path must end in
    it, or Slack would post where kelpie does not listen."""
    parts = urlsplit(url)
    if parts.scheme not in ("https", "http") or not parts.netloc:
        raise ConfigError([f"--url: {url!r} is not a URL; give https://HOST{events_path}"])
    path = parts.path.rstrip("/")
    if not path:
        return url.rstrip("/") + events_path
    if path != events_path.rstrip("/"):
        raise ConfigError(
            [
                f"--url: its path {parts.path} differs from slack.http.path {events_path}; "
                "change one so they match"
            ]
        )
    return url


def cmd_manifest(args: argparse.Namespace) -> int:
    from bot.config import HttpListen
    from bot.slack.manifest import manifest_yaml

    mode = args.mode or ("http" if args.url else "socket")
    try:
        path = HttpListen().path
        if args.config or resolve_config_path(None).exists():
            path = _load(args.config).slack.http.path
        url = _request_url(args.url, path) if args.url else None
    except ConfigError as error:
        return _print_config_problems(error)
    if mode == "http" and url is None:
        print("kelpie: --mode http needs --url https://HOST (where Slack reaches kelpie)")
        return EXIT_CONFIG
    sys.stdout.write(manifest_yaml(mode, url) if url else manifest_yaml(mode))
    return 0


def cmd_audit_verify(args: argparse.Namespace) -> int:
    from bot.store.audit import verify

    try:
        config = _load(args.config)
    except ConfigError as error:
        return _print_config_problems(error)
    _configure_logging(config, "ERROR")
    try:
        verdict = asyncio.run(_with_store(config, verify))
    except KelpieError as error:
        print(f"kelpie: {error.user_message}", file=sys.stderr)
        return EXIT_FAILED
    print(verdict.line())
    return 0 if verdict.intact else EXIT_FAILED


def cmd_audit_export(args: argparse.Namespace) -> int:
    from bot.store.audit import ExportFormat, render

    try:
        config = _load(args.config)
        since = _since(args.since) if args.since else None
    except ConfigError as error:
        return _print_config_problems(error)
    _configure_logging(config, "ERROR")
    try:
        rows = asyncio.run(_with_store(config, lambda db: _exported(db, args.thread, since)))
    except KelpieError as error:
        print(f"kelpie: {error.user_message}", file=sys.stderr)
        return EXIT_FAILED
    sys.stdout.write(render(rows, ExportFormat(args.format)))
    return 0


async def _with_store(config: Config, work: Any) -> Any:
    """`work(db)` on the configured database, which must be at this kelpie's schema."""
    from bot.errors import StoreError
    from bot.store.db import Database

    db = Database(config.database.url)
    try:
        await db.check()
        if not await db.at_head():
            raise StoreError(
                "the database's schema is older than this kelpie; start `kelpie run` once "
                "(it upgrades the schema), then try again"
            )
        return await work(db)
    finally:
        await db.close()


async def _exported(db: Any, link: str | None, since: Any) -> list[dict[str, Any]]:
    from bot.errors import StoreError
    from bot.store.audit import Scope, export_rows, session_of_thread, thread_of_link

    session_id = None
    if link:
        thread = thread_of_link(link)
        if thread is None:
            raise StoreError(f"--thread: {link!r} is not a Slack thread link (Copy link)")
        session_id = await session_of_thread(db, *thread)
        if session_id is None:
            raise StoreError(f"--thread: kelpie has no record of the thread {link}")
    return await export_rows(db, Scope(session_id=session_id, since=since))


def _since(value: str) -> datetime:
    """`--since`: an ISO date or time (UTC unless it says otherwise) or an age (30m, 12h,
    7d); a mistake is a ConfigError with one sentence."""
    age = re.fullmatch(r"(\d+)([mhd])", value.strip())
    if age:
        unit = {"m": "minutes", "h": "hours", "d": "days"}[age[2]]
        return datetime.now(UTC) - timedelta(**{unit: int(age[1])})
    try:
        moment = datetime.fromisoformat(value.strip())
    except ValueError:
        raise ConfigError(
            [f"--since: {value!r} is neither a date (2026-12-01T08:00) nor an age (7d, 12h)"]
        ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _audit_parser(commands: Any) -> None:
    audit = commands.add_parser("audit", help="check or export the audit")
    audit_commands = audit.add_subparsers(dest="audit_command", required=True)
    verify = audit_commands.add_parser(
        "verify", help="check the audit's hash chain: the first row changed, deleted or reordered"
    )
    verify.add_argument("--config", help=CONFIG_HELP)
    verify.set_defaults(handler=cmd_audit_verify)
    export = audit_commands.add_parser("export", help="print the audit rows (tool and write)")
    export.add_argument("--config", help=CONFIG_HELP)
    export.add_argument("--thread", metavar="LINK", help="only this thread's (its Slack link)")
    export.add_argument("--since", help="only rows since: a date/time (UTC) or an age (7d, 12h)")
    export.add_argument("--format", choices=["jsonl", "csv"], default="jsonl")
    export.set_defaults(handler=cmd_audit_export)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kelpie", description="Kubernetes chat-ops in Slack")
    parser.add_argument("--version", action="version", version=f"kelpie {kelpie_version()}")
    commands = parser.add_subparsers(dest="command", required=True)
    for name, handler, help_text in (
        ("run", cmd_run, "check the tokens, database and clusters, then start the bot"),
        ("check", cmd_check, "check every dependency for real, one line each"),
    ):
        sub = commands.add_parser(name, help=help_text)
        sub.add_argument("--config", help=CONFIG_HELP)
        sub.set_defaults(handler=handler)
    config = commands.add_parser("config", help="work with the config file")
    config_commands = config.add_subparsers(dest="config_command", required=True)
    config_check = config_commands.add_parser(
        "check", help="validate a config file (every problem at once) without starting"
    )
    config_check.add_argument("file", nargs="?", help=CONFIG_HELP)
    config_check.set_defaults(handler=cmd_config_check)
    chat = commands.add_parser(
        "chat", help="talk to kelpie in this terminal (same engine, pipeline and approvals)"
    )
    chat.add_argument("--config", help=CONFIG_HELP)
    chat.add_argument(
        "--channel",
        metavar="ID_OR_NAME",
        help="act with the role the config gives this channel (default: the im: true mapping)",
    )
    chat.add_argument(
        "--self-approve",
        action="store_true",
        help=(
            "decide your own changes where the role asks for someone else (four eyes); "
            "every such decision is recorded in the audit as self-approved"
        ),
    )
    chat.set_defaults(handler=cmd_chat)
    manifest = commands.add_parser("manifest", help="print the Slack app manifest")
    manifest.add_argument("--mode", choices=["socket", "http"])
    manifest.add_argument(
        "--url", help="where Slack reaches kelpie in http mode, e.g. https://kelpie.example.com"
    )
    manifest.add_argument("--config", help=CONFIG_HELP + "; its slack.http.path is used")
    manifest.set_defaults(handler=cmd_manifest)
    _audit_parser(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    args = _parser().parse_args(argv)
    return int(args.handler(args))


if __name__ == "__main__":
    sys.exit(main())
