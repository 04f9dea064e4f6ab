"""The agent loop: call the model, run the tools it asked for, repeat, answer.

The engine knows no Slack and no SDK. It persists every message through the
`ConversationStore` port as the turn goes (the assistant's tool calls before they run, each
result as it arrives) and emits typed events for whoever shows progress. Interruption is
task cancellation: the engine repairs the stored conversation (a result for every call) and
stores any partial answer as incomplete before re-raising.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from bot.agent.conversation import ConversationStore, Message, Role, SessionInfo
from bot.agent.events import (
    EventSink,
    RoundStarted,
    TextDelta,
    ToolFinished,
    ToolStarted,
    TurnFinish,
    TurnFinished,
    TurnStats,
)
from bot.model.types import ModelError, ModelGateway, ModelReply, ModelRequest, ToolCallRequest
from bot.policy.decision import CallScope
from bot.tools.harness import ToolHarness, parse_arguments, summarize_args
from bot.tools.spec import Tool, ToolArgumentError

log = logging.getLogger(__name__)

INTERRUPTED_RESULT = (
    "Interrupted: the turn was stopped before this call's result was recorded. A write "
    "runs only after approval; its card in the thread shows whether it ran."
)
FINAL_ANSWER_NUDGE = (
    "You have used all tool rounds for this turn. Without calling tools, give the best "
    "answer you can from what you found, and say what is still unknown."
)


@dataclass(frozen=True)
class RetryPolicy:
    retries: int = 2
    delay_s: float = 1.0  # the n-th retry waits delay_s × n


@dataclass
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
    max_rounds: int


@dataclass
class _TurnState:
    """What the turn has produced so far, for repair on interruption."""

    messages: list[dict[str, object]]
    pending_calls: list[ToolCallRequest] = field(default_factory=list)
    answered_call_ids: set[str] = field(default_factory=set)
    partial_text: str = ""
    stats_rounds: int = 0
    stats_calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    estimated: bool = False


Sleep = Callable[[float], Awaitable[None]]


class Engine:
    def __init__(
        self,
        gateway: ModelGateway,
        harness: ToolHarness,
        store: ConversationStore,
        retry: RetryPolicy,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self._gateway = gateway
        self._harness = harness
        self._store = store
        self._retry = retry
        self._sleep = sleep

    async def run_turn(self, request: TurnRequest, emit: EventSink) -> TurnFinished:
        started = time.monotonic()
        state = _TurnState(
            messages=[
                {"role": "system", "content": request.system_prompt},
                *(m.to_openai() for m in request.history),
                *([request.user_message.to_openai()] if request.user_message else []),
            ]
        )
        tools = [tool.openai_schema() for tool in request.tools]

        def finished(finish: TurnFinish, answer: str, error: str | None = None) -> TurnFinished:
            stats = TurnStats(
                model=self._gateway.model_name,
                rounds=state.stats_rounds,
                tool_calls=state.stats_calls,
                input_tokens=state.tokens_in,
                output_tokens=state.tokens_out,
                tokens_estimated=state.estimated,
                duration_s=time.monotonic() - started,
            )
            return TurnFinished(finish, answer, stats, error)

        try:
            for round_index in range(request.max_rounds):
                await emit(RoundStarted(round_index))
                reply = await self._complete(request, state, round_index, tools, emit)
                if not reply.tool_calls:
                    await self._answer(request, reply.text)
                    return finished(TurnFinish.STOP, reply.text)
                await self._run_tools(request, state, reply, emit)
            # Out of rounds: one last call without tools, for the best answer from what we have.
            state.messages.append({"role": "user", "content": FINAL_ANSWER_NUDGE})
            reply = await self._complete(request, state, request.max_rounds, [], emit)
            await self._answer(request, reply.text)
            return finished(TurnFinish.MAX_ITERATIONS, reply.text)
        except ModelError as error:
            await self._store_partial(request, state)
            return finished(TurnFinish.ERROR, state.partial_text, error.user_message)
        except asyncio.CancelledError:
            await asyncio.shield(self._repair(request, state))
            raise

    async def _complete(
        self,
        request: TurnRequest,
        state: _TurnState,
        round_index: int,
        tools: list[dict[str, object]],
        emit: EventSink,
    ) -> ModelReply:
        attempt = 0
        while True:
            if request.scope.abort.is_set():
                raise asyncio.CancelledError
            state.partial_text = ""

            async def on_text(delta: str) -> None:
                state.partial_text += delta
                await emit(TextDelta(delta))

            try:
                reply = await self._gateway.complete(
                    ModelRequest(messages=list(state.messages), tools=list(tools)), on_text
                )
            except ModelError as error:
                if not error.retryable or attempt >= self._retry.retries:
                    raise
                attempt += 1
                log.warning("model request failed (%s); retry %d", error, attempt)
                await self._sleep(self._retry.delay_s * attempt)
                continue
            state.stats_rounds += 1
            state.tokens_in += reply.usage.input_tokens
            state.tokens_out += reply.usage.output_tokens
            state.estimated = state.estimated or reply.usage.estimated
            await self._store.record_usage(
                request.session.id, request.turn_id, round_index, reply.model, reply.usage
            )
            return reply

    async def _run_tools(
        self, request: TurnRequest, state: _TurnState, reply: ModelReply, emit: EventSink
    ) -> None:
        calls = tuple(reply.tool_calls)
        assistant = Message(Role.ASSISTANT, reply.text or None, tool_calls=calls)
        # The calls are durable before any of them runs.
        await self._store.append(request.session.id, request.turn_id, [assistant])
        state.messages.append(assistant.to_openai())
        state.pending_calls = list(calls)
        state.partial_text = ""
        for call in calls:
            await emit(ToolStarted(call.id, call.name, _args_summary(call)))
            outcome = await self._harness.dispatch(call, request.scope)
            state.stats_calls += 1
            result = Message(Role.TOOL, outcome.content, tool_call_id=call.id, tool_name=call.name)
            await self._store.append(request.session.id, request.turn_id, [result])
            state.messages.append(result.to_openai())
            state.answered_call_ids.add(call.id)
            await emit(
                ToolFinished(
                    call.id, call.name, outcome.status, outcome.summary, outcome.attachment
                )
            )
        state.pending_calls = []

    async def _answer(self, request: TurnRequest, text: str) -> None:
        await self._store.append(
            request.session.id, request.turn_id, [Message(Role.ASSISTANT, text)]
        )

    async def _store_partial(self, request: TurnRequest, state: _TurnState) -> None:
        if state.partial_text:
            partial = Message(Role.ASSISTANT, state.partial_text, complete=False)
            await self._store.append(request.session.id, request.turn_id, [partial])

    async def _repair(self, request: TurnRequest, state: _TurnState) -> None:
        """Give every started call a result and keep a partial answer out of the history."""
        repairs = [
            Message(Role.TOOL, INTERRUPTED_RESULT, tool_call_id=call.id, tool_name=call.name)
            for call in state.pending_calls
            if call.id not in state.answered_call_ids
        ]
        try:
            await self._store.append(request.session.id, request.turn_id, repairs)
            await self._store_partial(request, state)
        except Exception:
            log.exception("could not store the repair of an interrupted turn")


def _args_summary(call: ToolCallRequest) -> str:
    try:
        return summarize_args(parse_arguments(call.arguments))
    except ToolArgumentError:
        return "(invalid arguments)"
