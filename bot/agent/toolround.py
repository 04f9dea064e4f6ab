"""One round of the model's tool calls, under the turn's policy.

Owns the engine's rules for calls: each call is validated (id present and unique, a known
tool, a JSON object of arguments) and a bad one gets a tool error the model can correct;
calls over the round's limit are not run and the model is told; read/diagnose calls run
concurrently (bounded), everything else one at a time after them; a repeated identical call
within the turn returns the earlier result with a note instead of reaching the cluster
again; long results are cut with a note on how to narrow the call; successful reads get an
evidence reference. Results come back in call order.

The security pipeline, approvals and execution stay in the tool harness: every call that
runs goes through `ToolHarness.dispatch`.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

from bot.agent.events import EventSink, ToolFinished, ToolStarted
from bot.agent.evidence import EvidenceLedger
from bot.model.router import ResolvedAgentPolicy
from bot.pipeline.decision import CallScope
from bot.pipeline.harness import ToolHarness, parse_arguments, summarize_args
from bot.toolsets.spec import Tool, ToolArgumentError, ToolKind
from bot.values import Message, Role, ToolCallRequest, ToolOutcome, ToolStatus

READ_CONCURRENCY = 4
CONCURRENT_KINDS = (ToolKind.READ, ToolKind.DIAGNOSE)
EVIDENCE_KINDS = (ToolKind.READ, ToolKind.DIAGNOSE)
INTERRUPTED_RESULT = (
    "Interrupted: the turn was stopped before this call's result was recorded. A write "
    "runs only after approval; its card in the thread shows whether it ran."
)
REPEATED_NOTE = (
    "(Repeated call: same tool and arguments as earlier in this turn. This is the earlier "
    "result; the cluster was not asked again. Change the arguments to get something new.)"
)
# Arguments that make a call return less, in the order worth suggesting.
_NARROWING = (
    "tail_lines",
    "since",
    "limit_bytes",
    "label_selector",
    "field_selector",
    "namespace",
    "name",
    "kind",
    "warnings_only",
    "container",
)


@dataclass
class PlannedCall:
    call: ToolCallRequest  # as stored: the id may have been replaced (and the model told)
    tool: Tool | None = None
    args: dict[str, Any] = field(default_factory=dict)
    error: str | None = None  # answered without running

    @property
    def key(self) -> str:
        return f"{self.call.name}:{json.dumps(self.args, sort_keys=True)}"


@dataclass
class _Ran:
    outcome: ToolOutcome
    repeated: bool


@dataclass(frozen=True)
class RoundOutcome:
    results: list[Message]
    # Set when the round was one successful call that asked to end the turn.
    yielded: ToolOutcome | None = None
    # A write in this round waits for a person's approval: the turn ends at the card.
    awaiting_approval: bool = False


def cut_result(text: str, limit: int, tool: Tool | None) -> str:
    """`text` within `limit` characters, with a note on how to narrow the call."""
    if len(text) <= limit:
        return text
    properties = (tool.parameters.get("properties") or {}) if tool is not None else {}
    hints = [name for name in _NARROWING if name in properties]
    how = (
        f"narrow the call with {', '.join(hints)}"
        if hints
        else "ask for a narrower result (a namespace, a name, a selector)"
    )
    keep_tail = "tail_lines" in properties  # logs: the newest lines matter most
    note = (
        f"[Result cut by kelpie: {len(text):,} characters, {limit:,} shown "
        f"({'the end' if keep_tail else 'the start'}); {how}.]"
    )
    room = max(0, limit - len(note) - 1)
    if keep_tail:
        return note + "\n" + text[len(text) - room :]
    return text[:room] + "\n" + note


class ToolRounds:
    """The tool-call side of one turn: validation, limits, repeats and evidence."""

    def __init__(
        self,
        harness: ToolHarness,
        tools: list[Tool],
        policy: ResolvedAgentPolicy,
        ledger: EvidenceLedger,
        scope: CallScope,
        emit: EventSink,
        concurrency: int = READ_CONCURRENCY,
    ) -> None:
        self._harness = harness
        self._tools = {tool.name: tool for tool in tools}
        self._policy = policy
        self._ledger = ledger
        self._scope = scope
        self._emit = emit
        self._concurrency = concurrency
        # The repeated-call guard: call key → the first call's outcome (or its future).
        self._seen: dict[str, asyncio.Future[ToolOutcome]] = {}
        self._refs: dict[str, str] = {}
        self._missing_ids = 0
        # The round in flight, for repair on interruption.
        self._planned: list[PlannedCall] = []
        self._ran: dict[str, _Ran] = {}
        self._recorded: set[str] = set()

    # --- validation ------------------------------------------------------------------------

    def plan(self, calls: list[ToolCallRequest]) -> list[PlannedCall]:
        planned: list[PlannedCall] = []
        ids: set[str] = set()
        accepted = 0
        limit = self._policy.calls_per_round
        for call in calls:
            item = PlannedCall(call)
            if not call.id:
                self._missing_ids += 1
                item.call = ToolCallRequest(
                    f"kelpie_missing_id_{self._missing_ids}", call.name, call.arguments
                )
                item.error = (
                    "this tool call had no id, so it was not run (kelpie named it "
                    f"{item.call.id}); every call needs a unique id."
                )
            elif call.id in ids:
                self._missing_ids += 1
                item.call = ToolCallRequest(
                    f"{call.id}_duplicate_{self._missing_ids}", call.name, call.arguments
                )
                item.error = (
                    f'the id "{call.id}" was already used by another call in this response, '
                    "so this call was not run; every call needs a unique id."
                )
            ids.add(item.call.id)
            if item.error is None:
                item.error = self._check(item)
            if item.error is None:
                if limit is not None and accepted >= limit:
                    noun = "call" if limit == 1 else "calls"
                    item.error = (
                        f"not run: only {limit} tool {noun} per response are accepted for this "
                        f"model; call {call.name} again in your next response if you still "
                        "need it."
                    )
                else:
                    accepted += 1
            planned.append(item)
        return planned

    def _check(self, item: PlannedCall) -> str | None:
        name = item.call.name
        if not name or not self._harness.knows(name):
            offered = ", ".join(sorted(self._tools)) or "none"
            return f'unknown tool "{name}"; use one of the tools offered ({offered}).'
        try:
            item.args = parse_arguments(item.call.arguments)
        except ToolArgumentError as error:
            return f"{name}: {error} The call was not run."
        item.tool = self._tools.get(name)
        return None

    # --- execution ---------------------------------------------------------------------------

    async def run(self, planned: list[PlannedCall]) -> RoundOutcome:
        self._planned, self._ran, self._recorded = planned, {}, set()
        for item in planned:
            await self._emit(ToolStarted(item.call.id, item.call.name, _summary(item)))
        for item in planned:
            if item.error is not None:
                await self._harness.refuse(item.call, self._scope, item.error)
                summary = item.error if len(item.error) <= 120 else item.error[:119] + "…"
                await self._emit(
                    ToolFinished(item.call.id, item.call.name, ToolStatus.FAILED, summary)
                )
        runnable = [item for item in planned if item.error is None]
        together = [item for item in runnable if _kind(item) in CONCURRENT_KINDS]
        one_by_one = [item for item in runnable if _kind(item) not in CONCURRENT_KINDS]
        if together:
            gate = asyncio.Semaphore(self._concurrency)

            async def bounded(item: PlannedCall) -> None:
                async with gate:
                    await self._run_one(item)

            async with asyncio.TaskGroup() as group:
                for item in together:
                    group.create_task(bounded(item))
        for item in one_by_one:
            await self._run_one(item)
        results = [self._result(item) for item in planned]
        yielded = None
        if len(planned) == 1 and planned[0].error is None:
            ran = self._ran[planned[0].call.id]
            if ran.outcome.status is ToolStatus.OK and ran.outcome.end_turn and not ran.repeated:
                yielded = ran.outcome
        awaiting = any(
            ran.outcome.status is ToolStatus.PENDING and not ran.repeated
            for ran in self._ran.values()
        )
        return RoundOutcome(results, yielded, awaiting)

    async def _run_one(self, item: PlannedCall) -> None:
        earlier = self._seen.get(item.key)
        if earlier is not None:
            outcome = await earlier
            self._ran[item.call.id] = _Ran(outcome, repeated=True)
            summary = f"repeated, not run again: {outcome.summary}"
            await self._emit(ToolFinished(item.call.id, item.call.name, outcome.status, summary))
            return
        future: asyncio.Future[ToolOutcome] = asyncio.get_running_loop().create_future()
        self._seen[item.key] = future
        try:
            outcome = await self._harness.dispatch(item.call, self._scope)
        except BaseException:
            # Not a result the model saw: a later identical call must really run.
            del self._seen[item.key]
            future.cancel()
            raise
        future.set_result(outcome)
        self._ran[item.call.id] = _Ran(outcome, repeated=False)
        await self._emit(
            ToolFinished(
                item.call.id,
                item.call.name,
                outcome.status,
                outcome.summary,
                outcome.attachment,
                outcome.picture,
            )
        )

    # --- results -------------------------------------------------------------------------------

    def _result(self, item: PlannedCall) -> Message:
        if item.error is not None:
            content = f"Error: {item.error}"
        else:
            ran = self._ran[item.call.id]
            content = cut_result(ran.outcome.content, self._policy.result_chars, item.tool)
            if ran.repeated:
                content = f"{REPEATED_NOTE}\n{content}"
            if ran.outcome.status is ToolStatus.OK and _kind(item) in EVIDENCE_KINDS:
                ref = self._refs.get(item.key)
                if ref is None:
                    ref = self._ledger.add(item.call.name, item.args, ran.outcome.evidence)
                    self._refs[item.key] = ref
                content = f"[{ref}] {content}"
        return Message(Role.TOOL, content, tool_call_id=item.call.id, tool_name=item.call.name)

    def unanswered(self) -> list[Message]:
        """Results for the round in flight that were not recorded yet (on interruption):
        the real result where the call finished, else an "interrupted" placeholder."""
        repairs = []
        for item in self._planned:
            if item.call.id in self._recorded:
                continue
            if item.error is not None or item.call.id in self._ran:
                repairs.append(self._result(item))
            else:
                repairs.append(
                    Message(
                        Role.TOOL,
                        INTERRUPTED_RESULT,
                        tool_call_id=item.call.id,
                        tool_name=item.call.name,
                    )
                )
        return repairs

    def mark_recorded(self) -> None:
        """The round's results are durable: nothing is left to repair."""
        self._recorded = {item.call.id for item in self._planned}


def _kind(item: PlannedCall) -> ToolKind | None:
    return item.tool.kind if item.tool is not None else None


def _summary(item: PlannedCall) -> str:
    try:
        return summarize_args(parse_arguments(item.call.arguments))
    except ToolArgumentError:
        return "(invalid arguments)"
