"""The agent loop: call the model, run the tools it asked for, repeat, answer.

A turn is a short state machine over rounds. Each round: checkpoint the conversation, call
the model (with retries), then either answer, wait for background results, or run the
round's tool calls (`toolround.ToolRounds` owns the rules for calls) and drain finished
background results. When the round budget is used up, one last call without tools asks for
the best answer from what was found. A tool may end the turn at once (direct presentation).

The engine knows no Slack and no SDK. It persists every message through the
`ConversationStore` port as the turn goes (the assistant's tool calls durably before they
run; the round's results, in call order, staged to ride along with the next commit, so a
round costs one commit) and emits typed events for whoever shows progress.
Interruption is task cancellation: the engine rolls the in-memory conversation back and,
when a person interrupted (the abort event is set; a shutdown leaves it clear), repairs the
stored one (a result for every call) and stores any partial answer as incomplete before
re-raising. Usage is recorded per round, estimated (characters / 4) when
the provider reports none; a request that reached the server is always counted.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace

from bot.agent.background import BackgroundInvestigations, render_results
from bot.agent.conversation import (
    ConversationState,
    ConversationStore,
    repair_tool_pairs,
    trim_history,
)
from bot.agent.events import (
    EventSink,
    RoundStarted,
    TextDelta,
    TurnEvent,
    TurnFinish,
    TurnFinished,
    TurnStarted,
    TurnStats,
)
from bot.agent.evidence import CitationFilter, EvidenceLedger
from bot.agent.loopshare import SLICE_S, LoopShare
from bot.agent.toolround import INTERRUPTED_RESULT, ToolRounds
from bot.model.router import ResolvedAgentPolicy, default_policy
from bot.model.types import (
    FinishReason,
    ModelError,
    ModelGateway,
    ModelReply,
    ModelRequest,
    RequestTag,
    Usage,
    estimate_usage,
)
from bot.pipeline.decision import CallScope
from bot.pipeline.harness import ToolHarness
from bot.toolsets.investigate import SPAWN_TOOL
from bot.toolsets.spec import Tool, ToolKind
from bot.values import Message, Role, SessionInfo

log = logging.getLogger(__name__)

__all__ = ["INTERRUPTED_RESULT", "Engine", "RetryPolicy", "TurnRequest"]

FINAL_ANSWER_NUDGE = (
    "You have used all tool rounds for this turn. Without calling tools, give the best "
    "answer you can from what you found, and say what is still unknown."
)
CONTINUE_NUDGE = (
    "Your answer was cut at the output limit. Continue exactly where it stopped, without "
    "repeating what you already wrote."
)
# Kept with a cut answer in the stored conversation, so later turns know it is not whole.
ANSWER_CUT_MARK = "[This answer was cut at the output limit.]"
PRESENTED_ANSWER = "Done: posted as a file in this thread."
# Where the approval is asked for differs per front end (a Slack card, the terminal's
# prompt): each gives its own sentence; this one names neither.
AWAITING_APPROVAL_ANSWER = (
    "Waiting for approval: nothing changes unless someone allowed to approve the change "
    "approves it. I will report the outcome here."
)
BACKGROUND_ROUNDS = 4
DRAIN_ROUNDS = 3
INVESTIGATOR_NOTE = (
    "You are a background investigator working for the main agent: answer the question "
    "below with concise findings and the evidence for them. Only read and diagnose tools "
    "are available; you cannot change anything or start other investigations."
)


@dataclass(frozen=True)
class RetryPolicy:
    retries: int = 2
    delay_s: float = 1.0  # the n-th retry waits delay_s × n


@dataclass(frozen=True)
class TurnRequest:
    session: SessionInfo
    turn_id: str
    system_prompt: str
    history: list[Message]
    # Already persisted by the caller; None when a turn resumes (e.g. after an approval
    # decided while kelpie was restarting) from the stored conversation alone.
    user_message: Message | None
    tools: list[Tool]
    scope: CallScope
    # Overrides the policy's round budget when set (tests, sub-agents).
    max_rounds: int | None = None
    policy: ResolvedAgentPolicy = field(default_factory=default_policy)
    # The session's first user message: history trimming always keeps it.
    opening: Message | None = None


Sleep = Callable[[float], Awaitable[None]]


class _UsageOnlyStore:
    """A background investigation's store: its messages stay in memory, usage is counted."""

    def __init__(self, store: ConversationStore) -> None:
        self._store = store

    async def append(self, session_id: int, turn_id: str, messages: list[Message]) -> None:
        return None

    def stage(self, session_id: int, turn_id: str, messages: list[Message]) -> None:
        return None

    async def history(
        self, session_id: int, limit: int, before_turn: str | None = None
    ) -> list[Message]:
        return []

    async def record_usage(
        self, session_id: int, turn_id: str, round_index: int, model: str, usage: Usage
    ) -> None:
        await self._store.record_usage(session_id, turn_id, round_index, model, usage)


async def _ignore(event: TurnEvent) -> None:
    return None


@dataclass
class _Turn:
    """One running turn: its request, conversation, ledger, tool rounds and helpers."""

    request: TurnRequest
    state: ConversationState
    ledger: EvidenceLedger
    rounds: ToolRounds
    background: BackgroundInvestigations | None
    emit: EventSink
    started: float
    tool_calls: int = 0
    partial_text: str = ""
    # The text of an answer cut at the output limit, while the model is asked to go on.
    cut_text: str = ""
    awaiting_approval: bool = False


class Engine:
    def __init__(
        self,
        gateway: ModelGateway,
        harness: ToolHarness,
        store: ConversationStore,
        retry: RetryPolicy,
        sleep: Sleep = asyncio.sleep,
        *,
        background_rounds: int = BACKGROUND_ROUNDS,
        drain_rounds: int = DRAIN_ROUNDS,
        awaiting_approval_answer: str = AWAITING_APPROVAL_ANSWER,
        loop_slice_s: float = SLICE_S,
    ) -> None:
        self._gateway = gateway
        self._loop_slice_s = loop_slice_s
        self._harness = harness
        self._store = store
        self._retry = retry
        self._sleep = sleep
        self._background_rounds = background_rounds
        self._drain_rounds = drain_rounds
        # The answer of a turn that ends at an approval: the front end's own words.
        self._awaiting_approval_answer = awaiting_approval_answer

    # --- the loop ---------------------------------------------------------------------------

    async def run_turn(self, request: TurnRequest, emit: EventSink) -> TurnFinished:
        turn = self._open(request, emit)
        policy = request.policy
        await emit(TurnStarted(self._gateway.model_name, str(policy.tier), str(policy.tier_source)))
        rounds = request.max_rounds or policy.rounds
        tools = [tool.openai_schema() for tool in request.tools]
        drains = 0
        try:
            for round_index in range(rounds):
                turn.state.checkpoint()
                await emit(RoundStarted(round_index))
                reply = await self._complete(turn, round_index, tools)
                if reply.tool_calls:
                    drains = 0
                    ended = await self._run_tools(turn, reply)
                    if ended is not None:
                        return await self._answer(turn, TurnFinish.STOP, ended)
                    await self._drain(turn)
                elif self._continues(turn, reply, round_index + 1 < rounds):
                    continue
                elif turn.background and turn.background.pending and drains < self._drain_rounds:
                    # An answer while investigations run: wait for their results instead.
                    drains += 1
                    await self._keep_interim(turn, reply.text)
                    await turn.background.wait()
                    await self._drain(turn)
                else:
                    return await self._answer(turn, TurnFinish.STOP, reply.text, reply)
            # Out of rounds: one last call without tools, for the best answer from what we have.
            turn.state.checkpoint()
            turn.state.messages.append({"role": "user", "content": FINAL_ANSWER_NUDGE})
            reply = await self._complete(turn, rounds, [])
            return await self._answer(turn, TurnFinish.MAX_ITERATIONS, reply.text, reply)
        except ModelError as error:
            turn.state.rollback()
            await self._store_partial(turn)
            partial = turn.cut_text + turn.partial_text
            return self._finished(turn, TurnFinish.ERROR, partial, error.user_message)
        except asyncio.CancelledError:
            turn.state.rollback()
            # A person interrupted (abort is set): close the turn's books now. A shutdown
            # (no abort) leaves them open: history loading pairs whatever stays unanswered.
            if turn.request.scope.abort.is_set():
                await asyncio.shield(self._repair(turn))
            raise
        finally:
            if turn.background is not None:
                await asyncio.shield(turn.background.close())

    def _open(self, request: TurnRequest, emit: EventSink) -> _Turn:
        policy = request.policy
        history = self._prepare_history(request)
        state = ConversationState.start(request.system_prompt, history, request.user_message)
        ledger = EvidenceLedger()
        background: BackgroundInvestigations | None = None
        scope = request.scope
        if any(tool.name == SPAWN_TOOL for tool in request.tools):
            background = BackgroundInvestigations(
                lambda bg_id, label, question, namespace: self._investigate(
                    request, bg_id, label, question, namespace
                )
            )
            scope = replace(scope, tool_context=replace(scope.tool_context, background=background))
        rounds = ToolRounds(self._harness, request.tools, policy, ledger, scope, emit)
        return _Turn(request, state, ledger, rounds, background, emit, time.monotonic())

    def _prepare_history(self, request: TurnRequest) -> list[Message]:
        history, repaired = repair_tool_pairs(list(request.history))
        if repaired:
            log.info("turn %s: repaired %d unpaired tool message(s)", request.turn_id, repaired)
        opening = request.opening
        if request.user_message is not None and opening is not None:
            if _same(opening, request.user_message):
                opening = None  # a new session: the opening is this turn's own message
        if opening is not None and not any(_same(opening, m) for m in history):
            history.insert(0, opening)
        keep = next((m for m in history if opening is not None and _same(opening, m)), None)
        policy = request.policy
        reserved = len(request.system_prompt) + len(
            (request.user_message.content or "") if request.user_message else ""
        )
        history, dropped = trim_history(
            history,
            policy.history_chars,
            strict=policy.history_strict,
            reserved_chars=reserved,
            keep=keep,
        )
        if dropped:
            log.info(
                "turn %s: trimmed %d old message(s) to the %d-char history budget",
                request.turn_id,
                dropped,
                policy.history_chars,
            )
        return history

    # --- model calls --------------------------------------------------------------------------

    async def _complete(
        self, turn: _Turn, round_index: int, tools: list[dict[str, object]]
    ) -> ModelReply:
        request = turn.request
        attempt = 0
        while True:
            if request.scope.abort.is_set():
                raise asyncio.CancelledError
            turn.partial_text = ""
            # What a person sees never cites evidence the ledger does not hold.
            citations = CitationFilter(turn.ledger)

            # A stream already buffered would otherwise hold the loop for its whole answer.
            share = LoopShare(self._loop_slice_s)

            async def on_text(
                delta: str, citations: CitationFilter = citations, share: LoopShare = share
            ) -> None:
                turn.partial_text += delta
                visible = citations.feed(delta)
                if visible:
                    await turn.emit(TextDelta(visible))
                await share.share()

            model_request = ModelRequest(
                messages=turn.state.request_messages(turn.ledger.note()),
                tools=list(tools),
                reasoning_effort=request.policy.reasoning_effort,
                tag=RequestTag(request.session.id, request.turn_id, round_index),
            )
            try:
                reply = await self._gateway.complete(model_request, on_text)
                tail = citations.finish()
                if tail:
                    await turn.emit(TextDelta(tail))
            except ModelError as error:
                if error.sent:
                    await self._count(turn, round_index, estimate_usage(model_request))
                if not error.retryable or attempt >= self._retry.retries:
                    raise
                attempt += 1
                log.warning("model request failed (%s); retry %d", error, attempt)
                await self._sleep(self._retry.delay_s * attempt)
                continue
            usage = reply.usage
            if not usage.input_tokens and not usage.output_tokens:
                calls = "".join(c.name + c.arguments for c in reply.tool_calls)
                usage = estimate_usage(model_request, reply.text, calls)
            turn.state.usage.rounds += 1
            await self._count(turn, round_index, usage, reply.model)
            return reply

    async def _count(
        self, turn: _Turn, round_index: int, usage: Usage, model: str | None = None
    ) -> None:
        turn.state.usage.add(usage)
        request = turn.request
        await self._store.record_usage(
            request.session.id,
            request.turn_id,
            round_index,
            model or self._gateway.model_name,
            usage,
        )

    # --- tools and background results -----------------------------------------------------

    async def _run_tools(self, turn: _Turn, reply: ModelReply) -> str | None:
        """Run the round's calls; the turn's answer when it ends here (a yield signal, or a
        write waiting at its approval card: the decision point ends the turn)."""
        request = turn.request
        planned = turn.rounds.plan(list(reply.tool_calls))
        assistant = Message(
            Role.ASSISTANT,
            reply.text or None,
            tool_calls=tuple(p.call for p in planned),
            thinking=reply.thinking,
        )
        # The calls are durable before any of them runs.
        await self._store.append(request.session.id, request.turn_id, [assistant])
        turn.state.add(assistant)
        turn.partial_text = ""
        outcome = await turn.rounds.run(planned)
        turn.tool_calls += len(planned)
        # Committed with the next round's calls or the answer: one commit per round.
        self._store.stage(request.session.id, request.turn_id, outcome.results)
        turn.rounds.mark_recorded()
        turn.state.add(*outcome.results)
        if outcome.awaiting_approval:
            turn.awaiting_approval = True
            return self._awaiting_approval_answer
        return PRESENTED_ANSWER if outcome.yielded is not None else None

    async def _keep_interim(self, turn: _Turn, text: str) -> None:
        if not text.strip():
            return
        message = Message(Role.ASSISTANT, text)
        self._store.stage(turn.request.session.id, turn.request.turn_id, [message])
        turn.state.add(message)
        turn.partial_text = ""

    async def _drain(self, turn: _Turn) -> None:
        """Append finished background results as one data message (nothing when none
        finished): marked as kelpie's and escaped, never in the person's voice."""
        if turn.background is None:
            return
        results = turn.background.take()
        if not results:
            return
        message = Message(Role.USER, render_results(results))
        self._store.stage(turn.request.session.id, turn.request.turn_id, [message])
        turn.state.add(message)

    async def _investigate(
        self,
        parent: TurnRequest,
        investigation_id: str,
        label: str,
        question: str,
        namespace: str | None,
    ) -> TurnFinished:
        """A background sub-agent: same engine class, read/diagnose tools, a small budget."""
        tools = [
            tool
            for tool in parent.tools
            if tool.kind in (ToolKind.READ, ToolKind.DIAGNOSE) and tool.name != SPAWN_TOOL
        ]
        context = parent.scope.tool_context
        scope = replace(
            parent.scope,
            offered=frozenset(tool.name for tool in tools),
            # The parent's cluster, identity and reach; no investigations of its own.
            tool_context=replace(
                context, default_namespace=namespace or context.default_namespace, background=None
            ),
        )
        policy = parent.policy.with_rounds(self._background_rounds, "background investigation")
        sub = Engine(
            self._gateway,
            self._harness,
            _UsageOnlyStore(self._store),
            self._retry,
            self._sleep,
            background_rounds=self._background_rounds,
            drain_rounds=self._drain_rounds,
            awaiting_approval_answer=self._awaiting_approval_answer,
        )
        request = TurnRequest(
            session=parent.session,
            turn_id=f"{parent.turn_id}:{investigation_id}",
            system_prompt=f"{parent.system_prompt}\n\n{INVESTIGATOR_NOTE}",
            history=[],
            user_message=Message(Role.USER, f'Investigation "{label}": {question}'),
            tools=tools,
            scope=scope,
            policy=policy,
        )
        return await sub.run_turn(request, _ignore)

    # --- ending ---------------------------------------------------------------------------------

    def _continues(self, turn: _Turn, reply: ModelReply, rounds_left: bool) -> bool:
        """An answer cut at the output limit: ask once to go on, when a round is left."""
        if reply.finish_reason is not FinishReason.LENGTH or turn.cut_text or not rounds_left:
            return False
        turn.cut_text = reply.text
        turn.partial_text = ""
        # In memory only: the stored turn gets the whole answer once it is complete.
        turn.state.messages.append({"role": "assistant", "content": reply.text})
        turn.state.messages.append({"role": "user", "content": CONTINUE_NUDGE})
        return True

    async def _answer(
        self, turn: _Turn, finish: TurnFinish, text: str, reply: ModelReply | None = None
    ) -> TurnFinished:
        answer, used = turn.ledger.check(turn.cut_text + text)
        cut = reply is not None and reply.finish_reason is FinishReason.LENGTH
        stored = f"{answer}\n\n{ANSWER_CUT_MARK}" if cut else answer
        await self._store.append(
            turn.request.session.id, turn.request.turn_id, [Message(Role.ASSISTANT, stored)]
        )
        return self._finished(turn, finish, answer, evidence=used, cut=cut)

    def _finished(
        self,
        turn: _Turn,
        finish: TurnFinish,
        answer: str,
        error: str | None = None,
        evidence: list[str] | None = None,
        cut: bool = False,
    ) -> TurnFinished:
        usage = turn.state.usage
        policy = turn.request.policy
        stats = TurnStats(
            model=self._gateway.model_name,
            rounds=usage.rounds,
            tool_calls=turn.tool_calls,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            tokens_estimated=usage.estimated,
            duration_s=time.monotonic() - turn.started,
            tier=str(policy.tier),
            tier_source=str(policy.tier_source),
            cut=cut,
        )
        return TurnFinished(
            finish,
            answer,
            stats,
            error,
            evidence=evidence or [],
            awaiting_approval=turn.awaiting_approval,
        )

    async def _store_partial(self, turn: _Turn) -> None:
        if turn.cut_text or turn.partial_text:
            text = turn.cut_text + turn.partial_text
            partial = Message(Role.ASSISTANT, text, complete=False)
            await self._store.append(turn.request.session.id, turn.request.turn_id, [partial])

    async def _repair(self, turn: _Turn) -> None:
        """Give every started call a result and keep a partial answer out of the history."""
        try:
            repairs = turn.rounds.unanswered()
            await self._store.append(turn.request.session.id, turn.request.turn_id, repairs)
            turn.rounds.mark_recorded()
            await self._store_partial(turn)
        except Exception:
            log.exception("could not store the repair of an interrupted turn")


def _same(a: Message, b: Message) -> bool:
    return (
        a.role is b.role
        and a.content == b.content
        and a.slack_ts == b.slack_ts
        and a.slack_user == b.slack_user
    )
