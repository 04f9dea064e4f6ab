"""`report.json` and `report.md` of a run: pass@1, pass^k, per category, tokens, cost
where the profile knows its prices, latency p50/p95, and every failure with its reason
and transcript. No score is written anywhere else."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from bot.eval.runner import CaseResult


@dataclass(frozen=True)
class RunInfo:
    model: str
    profile: str
    repeat: int
    started: datetime
    command: str
    judge: str | None = None
    prices: tuple[float, float] | None = None


def percentile(values: list[float], share: float) -> float:
    """Nearest-rank percentile; 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(share * len(ordered)))
    return ordered[rank - 1]


def _ratio(part: int, whole: int) -> float:
    return round(part / whole, 4) if whole else 0.0


def _case_entry(result: CaseResult) -> dict[str, Any]:
    failed = next((t for t in result.tries if not t.passed), None)
    shown = failed or (result.tries[0] if result.tries else None)
    return {
        "id": result.case.id,
        "category": str(result.case.category),
        "passed": result.passed,
        "pass_at_1": result.first_passed,
        "tries": [
            {
                "passed": t.passed,
                "reasons": t.reasons,
                "transcript": t.transcript,
                "input_tokens": t.input_tokens,
                "output_tokens": t.output_tokens,
                "latency_s": round(t.duration_s, 3),
                "judged": t.judged,
            }
            for t in result.tries
        ],
        "reason": "; ".join(failed.reasons) if failed else "",
        "transcript": shown.transcript if shown else "",
        "judged": any(t.judged for t in result.tries),
    }


def _per_category(results: list[CaseResult]) -> dict[str, dict[str, Any]]:
    categories: dict[str, list[CaseResult]] = {}
    for result in results:
        categories.setdefault(str(result.case.category), []).append(result)
    return {
        name: {
            "cases": len(group),
            "pass_at_1": _ratio(sum(r.first_passed for r in group), len(group)),
            "pass_hat_k": _ratio(sum(r.passed for r in group), len(group)),
        }
        for name, group in sorted(categories.items())
    }


def _failures(results: list[CaseResult]) -> list[dict[str, Any]]:
    return [
        {"id": r.case.id, "try": n, "reason": "; ".join(t.reasons), "transcript": t.transcript}
        for r in results
        for n, t in enumerate(r.tries, 1)
        if not t.passed
    ]


def build_report(results: list[CaseResult], info: RunInfo) -> dict[str, Any]:
    tries = [t for r in results for t in r.tries]
    tokens_in = sum(t.input_tokens for t in tries)
    tokens_out = sum(t.output_tokens for t in tries)
    cost = None
    if info.prices is not None:
        cost = round(tokens_in * info.prices[0] + tokens_out * info.prices[1], 6)
    latencies = [t.duration_s for t in tries]
    return {
        "model": info.model,
        "profile": info.profile,
        "date": info.started.isoformat(timespec="seconds"),
        "command": info.command,
        "repeat": info.repeat,
        "judge": info.judge,
        "cases": len(results),
        "pass_at_1": _ratio(sum(r.first_passed for r in results), len(results)),
        "pass_hat_k": _ratio(sum(r.passed for r in results), len(results)),
        "per_category": _per_category(results),
        "tokens": {"input": tokens_in, "output": tokens_out},
        "cost": cost,
        "latency_s": {
            "p50": round(percentile(latencies, 0.5), 3),
            "p95": round(percentile(latencies, 0.95), 3),
        },
        "per_case": [_case_entry(r) for r in results],
        "failures": _failures(results),
        "judged_cases": [r.case.id for r in results if any(t.judged for t in r.tries)],
    }


def markdown(report: dict[str, Any]) -> str:
    k = report["repeat"]
    cost = f"{report['cost']:.4f}" if report["cost"] is not None else "unknown (no prices)"
    lines = [
        f"# kelpie eval · {report['model']} (profile {report['profile']})",
        "",
        f"- date: {report['date']}",
        f"- command: `{report['command']}`",
        f"- cases: {report['cases']}, each tried {k} time(s)",
        f"- pass@1: {report['pass_at_1']:.1%}",
        f"- pass^{k} (every try passed): {report['pass_hat_k']:.1%}",
        f"- tokens: {report['tokens']['input']:,} in / {report['tokens']['output']:,} out",
        f"- cost: {cost}",
        f"- latency per try: p50 {report['latency_s']['p50']:.1f} s,"
        f" p95 {report['latency_s']['p95']:.1f} s",
        f"- LLM judge: {report['judge'] or 'none (judge facts were not checked)'}",
    ]
    if report["judged_cases"]:
        lines.append(f"- cases graded with the judge: {', '.join(report['judged_cases'])}")
    return "\n".join([*lines, *_tables(report)]) + "\n"


def _tables(report: dict[str, Any]) -> list[str]:
    k = report["repeat"]
    lines = [
        "",
        "## Per category",
        "",
        f"| category | cases | pass@1 | pass^{k} |",
        "|---|---|---|---|",
    ]
    for name, row in report["per_category"].items():
        lines.append(
            f"| {name} | {row['cases']} | {row['pass_at_1']:.0%} | {row['pass_hat_k']:.0%} |"
        )
    lines += [
        "",
        "## Cases",
        "",
        "| case | category | passed | tries passed |",
        "|---|---|---|---|",
    ]
    for case in report["per_case"]:
        passed = sum(t["passed"] for t in case["tries"])
        mark = "yes" if case["passed"] else "no"
        judged = " (judge)" if case["judged"] else ""
        lines.append(f"| {case['id']}{judged} | {case['category']} | {mark} | {passed}/{k} |")
    lines += ["", "## Failures", ""]
    if not report["failures"]:
        lines.append("None.")
    for failure in report["failures"]:
        lines.append(
            f"- **{failure['id']}** try {failure['try']}: {failure['reason']}"
            f" — transcript `{failure['transcript']}`"
        )
    return lines


def write_reports(report: dict[str, Any], out: Path) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    as_json, as_md = out / "report.json", out / "report.md"
    as_json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    as_md.write_text(markdown(report), encoding="utf-8")
    return as_json, as_md
