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
import time
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime, timedelta
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import yaml

from bot.config import Config, ConfigError, Secrets, load_config, resolve_config_path
from bot.errors import KelpieError

T = TypeVar("T")

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
            "server.health, server.alerts, server.mcp (and slack.http in http mode)"
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


def cmd_mcp_serve(args: argparse.Namespace) -> int:
    """`kelpie mcp serve --stdio`: the caller's token comes in KELPIE_MCP_TOKEN (stdio has
    no headers); it names one of `mcp.clients`, whose role applies."""
    from bot.app import serve_mcp_stdio

    if not args.stdio:
        print(
            "kelpie: only --stdio is served by this command; the HTTP server runs inside "
            "`kelpie run` when server.mcp is set",
            file=sys.stderr,
        )
        return EXIT_CONFIG
    try:
        config = _load(args.config)
        _configure_logging(config, "WARNING")  # on stderr: stdout carries the protocol
        secrets = Secrets(config)
        missing = secrets.check_all()
        if missing:
            raise ConfigError(missing)
    except ConfigError as error:
        return _print_config_problems(error)
    try:
        asyncio.run(serve_mcp_stdio(config, secrets, os.environ.get("KELPIE_MCP_TOKEN")))
    except KelpieError as error:
        print(f"kelpie: {error.user_message}", file=sys.stderr)
        return EXIT_FAILED
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


def _eval_cases(args: argparse.Namespace) -> list[Any]:
    from bot.eval.case import bundled_cases_dir, load_cases, select

    folder = Path(args.cases) if args.cases else bundled_cases_dir()
    return select(load_cases(folder), args.only)


def _eval_base(path_arg: str | None) -> dict[str, Any]:
    """The user's config as written: the eval takes its `models` (and agent limits); the
    rest may be absent. The run's config built from it is validated before anything runs."""
    path = resolve_config_path(path_arg)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise ConfigError([f"{path}: cannot read the config file ({error.strerror})"]) from None
    except yaml.YAMLError as error:
        raise ConfigError([f"{path}: not valid YAML ({error})"]) from None
    if not isinstance(data, dict) or not isinstance(data.get("models"), dict):
        raise ConfigError([f"{path}: models: the eval needs the model profiles of a config"])
    return data


def cmd_eval(args: argparse.Namespace) -> int:
    from bot.app import build_eval
    from bot.eval.case import CaseError
    from bot.eval.suite import SuiteOptions, run_suite

    try:
        cases = _eval_cases(args)
    except CaseError as error:
        print(f"kelpie: {error.user_message}", file=sys.stderr)
        return EXIT_CONFIG
    if args.list:
        for case in cases:
            print(f"{case.id}\t{case.category}\t{case.spec.question}")
        return 0
    if args.repeat < 1:
        print("kelpie: --repeat must be at least 1", file=sys.stderr)
        return EXIT_CONFIG
    try:
        base = _eval_base(args.config)
    except ConfigError as error:
        return _print_config_problems(error)
    _configure_logging(None, "ERROR")
    out = Path(args.out or f"kelpie-eval/{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")
    options = SuiteOptions(
        repeat=args.repeat,
        out=out,
        profile=args.profile,
        judge=args.judge,
        command=" ".join(["kelpie", *sys.argv[1:]]),
    )

    def build(config: Config, secrets: Secrets) -> Any:
        return build_eval(config, secrets, judge=args.judge)

    try:
        outcome = asyncio.run(run_suite(cases, base, build, options))
    except ConfigError as error:
        return _print_config_problems(error)
    except KelpieError as error:
        print(f"kelpie: {error.user_message}", file=sys.stderr)
        return EXIT_FAILED
    report = outcome.report
    print(
        f"pass@1 {report['pass_at_1']:.1%} · pass^{args.repeat} {report['pass_hat_k']:.1%} "
        f"over {report['cases']} cases · reports: {outcome.markdown_path}, {outcome.json_path}"
    )
    return 0 if outcome.all_passed else EXIT_FAILED


def _offline(
    args: argparse.Namespace,
    work: Callable[[Config], Coroutine[Any, Any, T]],
    shown: Callable[[T], int],
) -> int:
    """A command beside `kelpie run` (audit, eval export): the config loaded, logging at
    ERROR, `work(config)` run and its result `shown` (which gives the exit status); a
    problem is printed instead."""
    try:
        config = _load(args.config)
    except ConfigError as error:
        return _print_config_problems(error)
    _configure_logging(config, "ERROR")
    try:
        result = asyncio.run(work(config))
    except KelpieError as error:
        print(f"kelpie: {error.user_message}", file=sys.stderr)
        return EXIT_FAILED
    return shown(result)


def cmd_audit_verify(args: argparse.Namespace) -> int:
    from bot.store.audit import verify
    from bot.store.chain import Verdict

    anchors = args.anchor

    def shown(verdict: Verdict) -> int:
        print(verdict.line())
        return 0 if verdict.intact else EXIT_FAILED

    return _offline(args, lambda config: _with_store(config, lambda db: verify(db, anchors)), shown)


def cmd_audit_export(args: argparse.Namespace) -> int:
    from bot.store.audit import ExportFormat, render

    try:
        since = _since(args.since) if args.since else None
    except ConfigError as error:
        return _print_config_problems(error)

    def shown(rows: list[dict[str, Any]]) -> int:
        sys.stdout.write(render(rows, ExportFormat(args.format)))
        return 0

    return _offline(
        args,
        lambda config: _with_store(config, lambda db: _exported(db, args.thread, since)),
        shown,
    )


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


def _anchor(text: str) -> Any:
    from bot.store.chain import Anchor

    try:
        return Anchor.parse(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _audit_parser(commands: Any) -> None:
    audit = commands.add_parser("audit", help="check or export the audit")
    audit_commands = audit.add_subparsers(dest="audit_command", required=True)
    verify = audit_commands.add_parser(
        "verify", help="check the audit's hash chain: the first row changed, deleted or reordered"
    )
    verify.add_argument("--config", help=CONFIG_HELP)
    verify.add_argument(
        "--anchor",
        action="append",
        default=[],
        metavar="SEQ:HASH",
        type=_anchor,
        help="a head noted earlier (printed by verify, logged by kelpie run): the chain must "
        "still hold it (repeatable)",
    )
    verify.set_defaults(handler=cmd_audit_verify)
    export = audit_commands.add_parser("export", help="print the audit rows (tool and write)")
    export.add_argument("--config", help=CONFIG_HELP)
    export.add_argument("--thread", metavar="LINK", help="only this thread's (its Slack link)")
    export.add_argument("--since", help="only rows since: a date/time (UTC) or an age (7d, 12h)")
    export.add_argument("--format", choices=["jsonl", "csv"], default="jsonl")
    export.set_defaults(handler=cmd_audit_export)


def _eval_parser(commands: Any) -> None:
    sub = commands.add_parser(
        "eval", help="score the model on recorded incidents (replayed cluster, never a write)"
    )
    sub.add_argument("--config", help=CONFIG_HELP + "; its model profiles are used")
    sub.add_argument("--profile", help="the model profile to evaluate (default: models.active)")
    sub.add_argument("--repeat", type=int, default=1, metavar="K", help="tries per case")
    sub.add_argument("--cases", metavar="DIR", help="a folder of case folders (default: bundled)")
    sub.add_argument("--only", metavar="IDS", help="comma-separated case ids or categories")
    sub.add_argument("--list", action="store_true", help="list the cases and exit")
    sub.add_argument("--out", metavar="DIR", help="where report.md, report.json go")
    sub.add_argument("--judge", metavar="PROFILE", help="an LLM judge for free-text facts")
    sub.set_defaults(handler=cmd_eval)
    add_eval_export(sub.add_subparsers(dest="eval_command"))


def cmd_eval_export(args: argparse.Namespace) -> int:
    from bot.app import export_case
    from bot.feedback.export import ExportedCase

    def shown(case: ExportedCase) -> int:
        print(f"{case.path}: {case.objects} objects, {case.logs} logs re-read from the cluster")
        for line in case.missing:
            print(f"  not in the fixture: {line}")
        print("complete the TODOs in case.yaml (category, expect) before adding it to a suite")
        return 0

    return _offline(args, lambda config: export_case(config, args.thread, Path(args.out)), shown)


def add_eval_export(eval_commands: Any) -> None:
    """`kelpie eval export`, a subcommand of `eval`: `eval_commands` is its subparsers (not
    required, so `kelpie eval --options` still runs the suite)."""
    export = eval_commands.add_parser(
        "export", help="write a case skeleton from a Slack thread kelpie answered"
    )
    export.add_argument("--thread", required=True, help="the thread's Slack link (Copy link)")
    export.add_argument("--out", default="cases", help="folder to write the case in (./cases)")
    export.add_argument("--config", help=CONFIG_HELP)
    export.set_defaults(handler=cmd_eval_export)


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
    mcp = commands.add_parser("mcp", help="kelpie's MCP server for other agents")
    mcp_commands = mcp.add_subparsers(dest="mcp_command", required=True)
    serve = mcp_commands.add_parser(
        "serve", help="serve kelpie's tools over MCP on stdin/stdout (token: KELPIE_MCP_TOKEN)"
    )
    serve.add_argument("--stdio", action="store_true", help="speak MCP on stdin/stdout")
    serve.add_argument("--config", help=CONFIG_HELP)
    serve.set_defaults(handler=cmd_mcp_serve)
    manifest = commands.add_parser("manifest", help="print the Slack app manifest")
    manifest.add_argument("--mode", choices=["socket", "http"])
    manifest.add_argument(
        "--url", help="where Slack reaches kelpie in http mode, e.g. https://kelpie.example.com"
    )
    manifest.add_argument("--config", help=CONFIG_HELP + "; its slack.http.path is used")
    manifest.set_defaults(handler=cmd_manifest)
    _eval_parser(commands)
    _audit_parser(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    args = _parser().parse_args(argv)
    return int(args.handler(args))


if __name__ == "__main__":
    sys.exit(main())
