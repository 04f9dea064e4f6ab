"""Runs cases through the real engine, pipeline and approvals, one try at a time.

Each try is a new thread in its case's channel (`eval-<id>`, whose role is the case's
role), with the replay server serving the case's fixture. The turn runs to its end; an
approval card it posts is recorded and then withdrawn (never approved), so nothing the
runner does can change a cluster, and a withdrawn card starts no further turn.
"""

from __future__ import annotations

import asyncio
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, TextIO

from bot.agent.events import ToolFinished, ToolStarted
from bot.agent.session import AcceptedMessage, IncomingMessage
from bot.eval.case import Case
from bot.eval.grade import Attempt, answer_of, grade, shown_text
from bot.eval.replay import ReplayServer
from bot.eval.surface import Capture, Captures
from bot.model.types import ModelGateway, ModelRequest
from bot.pipeline.roles import ChannelBinding
from bot.values import Approval, ApprovalDecision, DecisionKind

EVAL_TEAM = "eval"
EVAL_USER = "kelpie-eval"
TRY_TIMEOUT_S = 600.0


def channel_of(case: Case) -> str:
    return f"eval-{case.id}"


def eval_config_data(
    base: dict[str, Any],
    cases: list[Case],
    *,
    replay: ReplayServer,
    kubeconfig: Path,
    database: Path,
    profile: str | None,
) -> dict[str, Any]:
    """The run's config: the models (and agent limits) of `base`, everything else the
    eval's own: a fresh SQLite database, each case's cluster at the replay server, one role
    and one channel per case, Prometheus and Loki at the replay server."""
    models = dict(base.get("models") or {})
    if profile is not None:
        models["active"] = profile
    clusters = sorted({case.spec.channel.cluster for case in cases})
    agent = {k: v for k, v in (base.get("agent") or {}).items() if k in _AGENT_KEYS} | {
        "verify_s": 0,
        "max_turns_per_person": None,
        "max_turns_per_channel": None,
    }
    return {
        "slack": {"mode": "socket"},
        "database": {"url": f"sqlite:///{database}"},
        "server": {"health": {"enabled": False}},
        "models": models,
        "agent": agent,
        "kubernetes": {
            "clusters": [
                {"name": name, "kubeconfig": str(kubeconfig), "context": name} for name in clusters
            ],
            "default": clusters[0],
        },
        "observability": {
            "prometheus": [{"name": "replay", "url": replay.prometheus_url}],
            "loki": [{"name": "replay", "url": replay.loki_url}],
        },
        "roles": {channel_of(case): case.spec.role for case in cases},
        "channels": [_channel(case) for case in cases],
        "default_role": "none",
        "firewall": {"deny_namespaces": ["kube-system"], "deny_kinds": ["Secret"]},
    }


def _channel(case: Case) -> dict[str, Any]:
    return {
        "match": {"name": channel_of(case)},
        "role": channel_of(case),
        "cluster": case.spec.channel.cluster,
        "namespace": case.spec.channel.namespace,
    }


_AGENT_KEYS = {"max_iterations", "thinking", "llm_retries", "llm_retry_delay_s", "tool_timeout_s"}


class Sessions(Protocol):
    async def accept(
        self, message: IncomingMessage, binding: ChannelBinding, *, claim: bool = False
    ) -> AcceptedMessage | None: ...

    async def run_turn(self, accepted: AcceptedMessage, abort: asyncio.Event) -> None: ...


class Decisions(Protocol):
    async def pending_in(self, session_id: int) -> list[Approval]: ...

    async def resume(self, approval_id: str, decision: ApprovalDecision) -> object: ...


class Roles(Protocol):
    def bind(
        self, channel_id: str, channel_name: str | None, is_im: bool
    ) -> ChannelBinding | None: ...


@dataclass
class EvalHarness:
    """What the composition root builds for a run (`bot.app.build_eval`)."""

    sessions: Sessions
    decisions: Decisions
    roles: Roles
    captures: Captures
    start: Callable[[], Any]
    close: Callable[[], Any]
    model_name: str
    # Cost per input and output token where the profile says (options), else None.
    prices: tuple[float, float] | None = None
    judge: ModelGateway | None = None


@dataclass
class TryResult:
    passed: bool
    reasons: list[str]
    transcript: str
    input_tokens: int = 0
    output_tokens: int = 0
    duration_s: float = 0.0
    judged: bool = False


@dataclass
class CaseResult:
    case: Case
    tries: list[TryResult] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return bool(self.tries) and all(t.passed for t in self.tries)

    @property
    def first_passed(self) -> bool:
        return bool(self.tries) and self.tries[0].passed


class Progress:
    """A one-line progress bar on stderr (a line per try where stderr is no terminal)."""

    def __init__(self, total: int, out: TextIO | None = None) -> None:
        self._total = max(total, 1)
        self._done = 0
        self._failed = 0
        self._out = out or sys.stderr

    def step(self, label: str, passed: bool) -> None:
        self._done += 1
        self._failed += 0 if passed else 1
        width = 30
        filled = width * self._done // self._total
        bar = "#" * filled + "-" * (width - filled)
        line = f"[{bar}] {self._done}/{self._total} · {self._failed} failed · {label}"
        if self._out.isatty():
            self._out.write(f"\r\x1b[K{line}")
            if self._done == self._total:
                self._out.write("\n")
        else:
            self._out.write(line + "\n")
        self._out.flush()


class Runner:
    def __init__(
        self,
        harness: EvalHarness,
        replay: ReplayServer,
        out: Path,
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        timeout_s: float = TRY_TIMEOUT_S,
    ) -> None:
        self._harness = harness
        self._replay = replay
        self._out = out
        self._clock = clock
        self._timeout_s = timeout_s
        self._serial = 0

    async def run(self, cases: list[Case], repeat: int, progress: Progress) -> list[CaseResult]:
        results = []
        for case in cases:
            result = CaseResult(case)
            for attempt in range(1, repeat + 1):
                outcome = await self.run_try(case, attempt)
                result.tries.append(outcome)
                progress.step(f"{case.id} try {attempt}", outcome.passed)
            results.append(result)
        return results

    async def run_try(self, case: Case, attempt: int) -> TryResult:
        self._replay.load(case.fixture, self._clock())
        self._serial += 1
        thread_ts = f"{time.time():.0f}.{self._serial:06d}"
        channel = channel_of(case)
        message = IncomingMessage(
            team_id=EVAL_TEAM,
            channel_id=channel,
            channel_name=channel,
            is_dm=False,
            thread_ts=thread_ts,
            ts=thread_ts,
            user=EVAL_USER,
            text=case.spec.question,
        )
        capture = self._harness.captures.begin(message.session_key)
        started = time.monotonic()
        problem = await self._turn(message, case)
        duration = time.monotonic() - started
        found = Attempt(case, capture, tuple(self._replay.writes))
        reasons = ([problem] if problem else []) + grade(found)
        judged = False
        if self._harness.judge is not None and case.spec.expect.judge:
            judged = True
            reasons += await judge_facts(self._harness.judge, case, answer_of(found))
        transcript = self._write_transcript(case, attempt, capture, reasons)
        stats = capture.finished.stats if capture.finished else None
        return TryResult(
            passed=not reasons,
            reasons=reasons,
            transcript=str(transcript),
            input_tokens=stats.input_tokens if stats else 0,
            output_tokens=stats.output_tokens if stats else 0,
            duration_s=duration,
            judged=judged,
        )

    async def _turn(self, message: IncomingMessage, case: Case) -> str | None:
        binding = self._harness.roles.bind(message.channel_id, message.channel_name, False)
        if binding is None:
            return f"the case's channel {message.channel_id} has no role"
        accepted = await self._harness.sessions.accept(message, binding)
        if accepted is None:
            return "the question was not accepted"
        try:
            await asyncio.wait_for(
                self._harness.sessions.run_turn(accepted, asyncio.Event()), self._timeout_s
            )
        except TimeoutError:
            return f"the turn did not finish within {self._timeout_s:.0f} s"
        finally:
            await self._withdraw(accepted.session.id)
        return None

    async def _withdraw(self, session_id: int) -> None:
        """A proposed change stays proposed: its card is withdrawn, never approved."""
        for approval in await self._harness.decisions.pending_in(session_id):
            await self._harness.decisions.resume(
                approval.id, ApprovalDecision(DecisionKind.WITHDRAW, EVAL_USER)
            )

    def _write_transcript(
        self, case: Case, attempt: int, capture: Capture, reasons: list[str]
    ) -> Path:
        folder = self._out / "transcripts"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{case.id}.try{attempt}.txt"
        text = transcript(case, capture, reasons)
        for secret in case.spec.expect.secrets:  # a leak is reported, not repeated
            text = text.replace(secret, "«secret»")
        path.write_text(text, encoding="utf-8")
        return path


def transcript(case: Case, capture: Capture, reasons: list[str]) -> str:
    lines = [
        f"case {case.id} ({case.category})",
        f"channel #{channel_of(case)} · cluster {case.spec.channel.cluster}"
        f" · namespace {case.spec.channel.namespace or '-'}",
        f"question: {case.spec.question}",
        "",
        "--- what the thread showed ---",
        shown_text(capture).rstrip(),
        "",
        "--- tool calls ---",
    ]
    args = {e.tool_call_id: e.args_summary for e in capture.events if isinstance(e, ToolStarted)}
    for event in capture.events:
        if isinstance(event, ToolFinished):
            lines.append(f"{event.name} {args.get(event.tool_call_id, '')} -> {event.status}")
    lines += ["", "--- grade ---", *(reasons or ["passed"])]
    return "\n".join(lines) + "\n"


JUDGE_PROMPT = (
    "You grade an answer of a Kubernetes assistant. For each numbered fact, say whether the "
    "answer states it (in any words). Reply with one line per fact, `<number>: yes` or "
    "`<number>: no`, and nothing else."
)


async def judge_facts(judge: ModelGateway, case: Case, answer: str) -> list[str]:
    """The judge's verdict on the case's free-text facts: a reason per fact it missed."""
    facts = case.spec.expect.judge
    listed = "\n".join(f"{n}. {fact}" for n, fact in enumerate(facts, 1))
    request = ModelRequest(
        messages=[
            {"role": "system", "content": JUDGE_PROMPT},
            {"role": "user", "content": f"Answer:\n{answer}\n\nFacts:\n{listed}"},
        ]
    )

    async def ignore(_: str) -> None:
        return None

    reply = await judge.complete(request, ignore)
    said = {int(n): word.lower() == "yes" for n, word in _VERDICT.findall(reply.text)}
    return [
        f"the judge did not find this fact in the answer: {fact}"
        for n, fact in enumerate(facts, 1)
        if not said.get(n, False)
    ]


_VERDICT = re.compile(r"^\s*(\d+)\s*[:.)]\s*(yes|no)\b", re.IGNORECASE | re.MULTILINE)
