"""One `kelpie eval` run: the replay server, the run's config, the harness the composition
root builds, the tries, the reports. The CLI parses arguments and calls `run_suite`."""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from bot.config import Config, ConfigError, Secrets, parse_config
from bot.eval.case import Case
from bot.eval.replay import ReplayServer
from bot.eval.report import RunInfo, build_report, write_reports
from bot.eval.runner import EvalHarness, Progress, Runner, eval_config_data

log = logging.getLogger(__name__)

HarnessBuilder = Callable[[Config, Secrets], EvalHarness]


@dataclass(frozen=True)
class SuiteOptions:
    repeat: int
    out: Path
    profile: str | None
    judge: str | None
    command: str


@dataclass(frozen=True)
class SuiteOutcome:
    report: dict[str, Any]
    json_path: Path
    markdown_path: Path

    @property
    def all_passed(self) -> bool:
        return all(case["passed"] for case in self.report["per_case"])


async def run_suite(
    cases: list[Case],
    base: dict[str, Any],
    build: HarnessBuilder,
    options: SuiteOptions,
    *,
    environ: dict[str, str] | None = None,
    progress_to: TextIO | None = None,
) -> SuiteOutcome:
    """Run every case `options.repeat` times and write both reports into `options.out`.
    Raises `ConfigError` when the run's config (the models of `base`) is not valid."""
    started = datetime.now(UTC)
    replay = ReplayServer()
    await replay.start()
    try:
        with tempfile.TemporaryDirectory(prefix="kelpie-eval-") as scratch:
            config = _run_config(cases, base, options, replay, Path(scratch))
            harness = build(config, Secrets(config, environ))
            await harness.start()
            try:
                runner = Runner(harness, replay, options.out)
                progress = Progress(len(cases) * options.repeat, progress_to)
                results = await runner.run(cases, options.repeat, progress)
            finally:
                await harness.close()
    finally:
        await replay.stop()
    info = RunInfo(
        model=harness.model_name,
        profile=config.models.active,
        repeat=options.repeat,
        started=started,
        command=options.command,
        judge=options.judge,
        prices=harness.prices,
    )
    report = build_report(results, info)
    json_path, markdown_path = write_reports(report, options.out)
    return SuiteOutcome(report, json_path, markdown_path)


def _run_config(
    cases: list[Case],
    base: dict[str, Any],
    options: SuiteOptions,
    replay: ReplayServer,
    scratch: Path,
) -> Config:
    clusters = sorted({case.spec.channel.cluster for case in cases})
    data = eval_config_data(
        base,
        cases,
        replay=replay,
        kubeconfig=replay.write_kubeconfig(scratch / "kubeconfig", clusters),
        database=scratch / "eval.db",
        profile=options.profile,
    )
    config = parse_config(data)
    if options.judge is not None and options.judge not in config.models.profiles:
        raise ConfigError([f"--judge: no model profile is named {options.judge}"])
    return config
