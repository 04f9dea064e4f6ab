"""What a diagnosis is made of: findings, each resting on one field of one object, ranked
and rendered compactly for the model.

A diagnose tool's result is one entry of the turn's evidence ledger ([E#], like every read
result). Each finding in it names the object and the field path it rests on, with the value
read there (`Pod shop/web-1 status.containerStatuses[app].lastState.terminated.reason=
OOMKilled`), so a claim cited with that [E#] can be checked by re-reading that field with a
read tool; a finding never rests on anything the tool did not read.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from bot.toolsets.spec import ToolResult
from bot.values import plural

# Findings a diagnose_namespace result shows unless the call asks for another number.
DEFAULT_SHOWN = 10
_VALUE_CHARS = 160  # a field's value, as quoted in the evidence line
_ORDER = {"critical": 0, "warning": 1, "info": 2}


class Severity(StrEnum):
    CRITICAL = "critical"  # it does not work now (crashing, unschedulable, no endpoints)
    WARNING = "warning"  # degraded or about to be (pressure, unavailable replicas, at max)
    INFO = "info"  # worth knowing, nothing is broken


@dataclass(frozen=True)
class ObjectRef:
    kind: str
    namespace: str  # "" for cluster-scoped objects
    name: str

    def __str__(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.kind} {where}{self.name}"


@dataclass(frozen=True)
class Evidence:
    """The field a finding rests on, and the value read there."""

    obj: ObjectRef
    field: str  # e.g. status.conditions[PodScheduled].message
    value: str

    def cited(self) -> str:
        """The field and its value, as quoted (the value clipped)."""
        return f"{self.field}={clip(self.value, _VALUE_CHARS)}"

    def __str__(self) -> str:
        return f"{self.obj} {self.cited()}"


@dataclass(frozen=True)
class Finding:
    severity: Severity
    code: str  # the problem's name, e.g. CrashLoopBackOff (findings are counted by it)
    subject: ObjectRef  # the object diagnosed
    evidence: Evidence
    text: str  # one line: what is wrong
    next_step: str  # one line: what to look at or do next
    detail: tuple[str, ...] = ()  # e.g. the previous container's last log lines (masked)


def clip(text: str, limit: int) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def ranked(findings: Sequence[Finding]) -> list[Finding]:
    """Critical first, then the problems affecting the most objects, then by object."""
    counts = Counter(f.code for f in findings)
    return sorted(
        findings,
        key=lambda f: (_ORDER[f.severity], -counts[f.code], f.code, str(f.subject)),
    )


def tally(findings: Sequence[Finding]) -> str:
    """ "2 critical, 1 warning" (severities present only, most severe first)."""
    counts = Counter(f.severity for f in findings)
    return ", ".join(f"{counts[s]} {s}" for s in Severity if counts[s])


def render(
    target: str,
    findings: Sequence[Finding],
    *,
    checked: str,
    shown: int | None = None,
    notes: Sequence[str] = (),
) -> ToolResult:
    """The result the model reads: a summary line, what could not be checked, then the
    ranked findings (at most `shown`, with a count of the rest). The most severe come first,
    so a result cut to the model's budget loses the least."""
    order = ranked(findings)
    if not order:
        summary = f"Diagnosis of {target}: no problems found"
        lines = [f"{summary} (checked {checked})."]
    else:
        summary = f"Diagnosis of {target}: {plural(len(order), 'finding')} ({tally(order)})"
        lines = [summary + "."]
    lines += [f"Not checked: {note}" for note in notes]
    visible = order if shown is None else order[:shown]
    previous: Finding | None = None
    for number, finding in enumerate(visible, 1):
        lines += _finding_lines(number, finding, previous)
        previous = finding
    rest = order[len(visible) :]
    if rest:
        lines.append(
            f"… and {plural(len(rest), 'more finding')} ({tally(rest)}) not shown; "
            "raise max_findings or diagnose one pod, workload or service."
        )
    return ToolResult(text="\n".join(lines), summary=summary)


def _finding_lines(number: int, finding: Finding, previous: Finding | None) -> list[str]:
    # Compact: the evidence names its object only when it is not the finding's subject,
    # and a next step the finding before already gave is not repeated.
    evidence = finding.evidence
    cited = evidence.cited() if evidence.obj == finding.subject else str(evidence)
    lines = [
        f"{number}. [{finding.severity}] {finding.code} {finding.subject}: {finding.text}",
        f"   evidence: {cited}",
    ]
    if previous is None or previous.next_step != finding.next_step:
        lines.append(f"   next: {finding.next_step}")
    return lines + [f"   {line}" for line in finding.detail]
