"""A session is one Slack thread (or DM thread). This module turns an accepted user message
into a turn: it records the message, reloads the thread's history from the database,
builds the prompt and the tool scope, runs the engine and hands events to a reporter.

It knows no Slack: the adapter gives it an `IncomingMessage` and a `ChannelBinding`, and a
`ReporterFactory` port shows progress wherever the message came from.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from bot import logs
from bot.agent.compaction import Compactor
from bot.agent.conversation import ConversationStore
from bot.agent.engine import Engine, TurnRequest
from bot.agent.events import TurnEvent, TurnFinish, TurnFinished, TurnStats
from bot.agent.knowledge import KnowledgeOffer, knowledge_for
from bot.agent.prompt import PromptContext, system_prompt, user_message
from bot.agent.turns import TurnBody
from bot.approvals.recheck import Bindings
from bot.config import Config, OnNewMessage
from bot.model.router import ModelRouter, ResolvedAgentPolicy, resolve_policy
from bot.pipeline.decision import CallScope
from bot.pipeline.harness import ToolRegistry
from bot.pipeline.roles import ChannelBinding, narrower, offered_tools
from bot.store.retry import RETRY_DELAYS, retrying
from bot.store.wakeups import Wakeups
from bot.toolsets.spec import Tool
from bot.values import (
    AcceptedTurn,
    Admission,
    Approval,
    Message,
    Role,
    SessionInfo,
    TurnClaim,
    TurnState,
    Wake,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class IncomingMessage:
    team_id: str
    channel_id: str
    channel_name: str | None
    is_dm: bool
    thread_ts: str  # the thread root: the session key's last part
    ts: str  # this message
    user: str
    text: str
    # The Slack delivery it came in (its inbox key): accepted once, however often delivered.
    event_key: str | None = None
    # Its writer is from another organisation (Slack Connect): admitted under the
    # external users' role, and whoever runs its turn later judges it so again.
    external: bool = False

    @property
    def session_key(self) -> str:
        return f"{self.team_id}:{self.channel_id}:{self.thread_ts}"

    @property
    def origin(self) -> TurnOrigin:
        return TurnOrigin(self.user, self.ts, self.text)


@dataclass(frozen=True)
class TurnOrigin:
    """What a front end shows of a turn beyond its session: whom it answers, and the
    person's message that prompted it when one did."""

    asker: str
    message_ts: str | None = None  # None: no one wrote it (the turn after a decision)
    text: str = ""  # that message's text, which titles a session it starts
    turn_id: str = ""  # the turn it starts: what feedback on its answer refers to


@dataclass(frozen=True)
class DecisionTurn:
    """The turn after a decision on an approval card: the agent reads the outcome (stored
    as this turn's opening note) and tells the thread. Nobody wrote it: it answers the
    person who asked for the change, reacting to no message."""

    session: SessionInfo
    turn_id: str
    approval: Approval  # the decided card: who asked, who decided (`decided_by`), the outcome
    note: Message  # the outcome as the model reads it


class Reporter(Protocol):
    async def emit(self, event: TurnEvent) -> None: ...

    async def close(self, finished: TurnFinished) -> None: ...


class TurnMessages(Protocol):
    """Where a reporter records each message it shows the turn in while that message is
    open (a long answer goes on in a second stream message), so that whoever takes the turn
    over after a crash closes every one left open."""

    async def opened(self, ts: str) -> None: ...

    async def closed(self, ts: str) -> None: ...

    def deferred(self, calls_json: str) -> None:
        """The turn's closing calls (JSON) go out later, when the workspace's budget has
        room: kept with the turn's end, so a crash or a stop before then loses none."""
        ...

    def sent(self, closed: Sequence[str]) -> None:
        """Slack accepted them, closing the messages in `closed`."""
        ...


class ReporterFactory(Protocol):
    async def open(
        self, session: SessionInfo, origin: TurnOrigin, messages: TurnMessages
    ) -> Reporter: ...

    async def settle(self, session: SessionInfo, *, awaiting_approval: bool) -> None:
        """No turn follows what just happened in the session (a decision recorded without
        an answer): show it idle, or waiting for a person if a card still waits."""
        ...


class SessionLifecycleHooks(Protocol):
    async def session_start(self, info: dict[str, object]) -> None: ...

    async def session_end(self, info: dict[str, object]) -> None: ...


class SessionStore(Protocol):
    async def find(self, session_key: str) -> SessionInfo | None: ...

    async def get(self, session_id: int) -> SessionInfo | None: ...

    async def get_or_create(self, template: SessionInfo) -> SessionInfo: ...


@dataclass(frozen=True)
class AcceptedMessage:
    session: SessionInfo
    message: IncomingMessage
    binding: ChannelBinding
    turn_id: str
    user_message: Message  # as stored
    claimed: bool = False  # recorded running here already (the ledger's `begin`)


@dataclass(frozen=True)
class _TurnSpec:
    """What any turn runs on, whatever started it."""

    session: SessionInfo
    binding: ChannelBinding
    turn_id: str
    origin: TurnOrigin
    # The turn's own stored opening (a person's message, a decision's note), answered by
    # it; None: the turn's messages are all in the stored conversation already.
    opening: Message | None
    claimed: bool = False  # its row says running here already: no claim to make
    # Stored with the turn's row when its claim is the first to write one (a decision's).
    admission: Admission | None = None


class TurnLedger(Protocol):
    """Where each turn's state is kept, shared by every replica (`bot.store.turns`)."""

    async def begin(
        self,
        thread: SessionInfo,
        turn_id: str,
        asker: str,
        messages: list[Message],
        event_key: str | None = None,
        *,
        claim: bool = False,
        admission: Admission | None = None,
    ) -> AcceptedTurn | None: ...

    async def claim(
        self, session_id: int, turn_id: str, asker: str, admission: Admission | None = None
    ) -> TurnClaim: ...

    async def admission(self, turn_id: str) -> Admission | None:
        """What the turn was admitted under (None: unknown, a turn stored before turns
        kept it)."""
        ...

    async def request_interrupt(self, session_id: int) -> bool: ...

    async def message_opened(self, turn_id: str, ts: str) -> None: ...

    async def message_closed(self, turn_id: str, ts: str) -> None: ...

    async def finish(
        self,
        turn_id: str,
        state: TurnState,
        closed: Sequence[str] = (),
        closing: str | None = None,
    ) -> None:
        """The turn ended (and the messages in `closed` with it, and its `closing` calls
        still to go out, in the same commit)."""
        ...

    def closing_sent(self, turn_id: str, closed: Sequence[str] = ()) -> None:
        """The turn's closing calls went out (with the next commit, not one of its own)."""
        ...

    def release(self, turn_id: str) -> None:
        """The turn's end could not be stored: this process lets it go (its lease lapses,
        and a takeover closes it in its thread with a note)."""
        ...


# How often a turn waiting for its thread asks again (another replica runs a turn there),
# unless a wake-up (PostgreSQL) says that turn ended.
CLAIM_POLL_S = 0.5


class SessionOpenings(Protocol):
    async def first_user_message(self, session_id: int) -> Message | None: ...


class WaitingApprovals(Protocol):
    """The session's approval cards still waiting for a person."""

    async def pending_in(self, session_id: int) -> Sequence[object]: ...


class AgentSessions:
    def __init__(
        self,
        config: Config,
        sessions: SessionStore,
        conversation: ConversationStore,
        engine: Engine,
        registry: ToolRegistry,
        reporters: ReporterFactory,
        hooks: SessionLifecycleHooks,
        *,
        router: ModelRouter | None = None,
        openings: SessionOpenings | None = None,
        waiting: WaitingApprovals | None = None,
        ledger: TurnLedger | None = None,
        wakeups: Wakeups | None = None,
        claim_poll_s: float = CLAIM_POLL_S,
        finish_delays: Sequence[float] = RETRY_DELAYS,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        bindings: Bindings | None = None,
        compactor: Compactor | None = None,
        knowledge: KnowledgeOffer | None = None,
    ) -> None:
        # Long threads: history by the tier's budget, older rounds as kelpie's note.
        self._compactor = compactor
        self._config = config
        # The team's runbooks and remembered incidents offered at a turn's start.
        self._knowledge = knowledge
        self._sessions = sessions
        self._conversation = conversation
        self._engine = engine
        self._registry = registry
        self._reporters = reporters
        self._hooks = hooks
        self._router = router
        self._openings = openings
        self._waiting = waiting
        self._ledger = ledger
        self._wakeups = wakeups or Wakeups()
        self._claim_poll_s = claim_poll_s
        self._finish_delays = finish_delays
        self._sleep = sleep
        # None: the configuration's roles alone judge a turn run later (no channel lookup).
        self._bindings = bindings

    async def warm_up(self) -> None:
        """The reads a turn makes, once, for a thread that does not exist (nothing found,
        nothing written): SQLAlchemy compiles a statement at its first use, a few ms of the
        event loop each, and keeps it for the engine's life; the first question then finds
        them compiled, like the tenth."""
        await self._sessions.find("")
        await self._conversation.history(0, self._config.agent.history_messages)
        if self._compactor is not None:
            await self._compactor.memory.recent(0, 1, None)
        if self._openings is not None:
            await self._openings.first_user_message(0)
        if self._waiting is not None:
            await self._waiting.pending_in(0)

    async def _policy(self, tools: list[Tool]) -> ResolvedAgentPolicy:
        """The turn's policy from the router; without one, from the config alone."""
        if self._router is not None:
            return await self._router.resolve(tools)
        profile = self._config.models.active_profile
        return resolve_policy(
            model=profile.model,
            profile_tier=profile.tier,
            max_iterations=self._config.agent.max_iterations,
            thinking=self._config.agent.thinking,
            tools=tools,
        )

    async def accept(
        self, message: IncomingMessage, binding: ChannelBinding, *, claim: bool = False
    ) -> AcceptedMessage | None:
        """Record the session, the user's message and the turn before anything else can
        fail, in one transaction (`claim`: and the turn as running here, when no other turn
        of the thread runs); None when this delivery was accepted before (replayed after a
        crash)."""
        thread = SessionInfo(
            id=0,
            session_key=message.session_key,
            team_id=message.team_id,
            channel_id=message.channel_id,
            thread_ts=message.thread_ts,
            is_dm=message.is_dm,
            role=binding.role_name,
            cluster=binding.cluster,
            namespace=binding.namespace,
            started_by=message.user,
        )
        turn_id = uuid.uuid4().hex
        text = user_message(
            message.text,
            channel=message.channel_name or message.channel_id,
            role_name=binding.role_name,
            cluster=binding.cluster,
            namespace=binding.namespace,
            slack_user=message.user,
        )
        user = Message(Role.USER, text, slack_user=message.user, slack_ts=message.ts)
        admission = Admission(
            binding.role_name, binding.cluster, binding.namespace, external=message.external
        )
        if self._ledger is None:
            session = await self._sessions.get_or_create(thread)
            await self._conversation.append(session.id, turn_id, [user])
            stored = AcceptedTurn(session, claimed=False)
        else:
            # A thread seen before keeps its session; a new one gets it in the same commit.
            thread = await self._sessions.find(thread.session_key) or thread
            found = await self._ledger.begin(
                thread,
                turn_id,
                message.user,
                [user],
                message.event_key,
                claim=claim,
                admission=admission,
            )
            if found is None:
                log.info("delivery %s was accepted before; not answered twice", message.event_key)
                return None
            stored = found
        if stored.session.created:
            await self._hooks.session_start(_hook_info(stored.session, message.user, binding))
        return AcceptedMessage(stored.session, message, binding, turn_id, user, stored.claimed)

    async def run_turn(self, accepted: AcceptedMessage, abort: asyncio.Event) -> None:
        """Answer a person's message (already stored, with its turn)."""
        spec = _TurnSpec(
            accepted.session,
            accepted.binding,
            accepted.turn_id,
            accepted.message.origin,
            accepted.user_message,
            accepted.claimed,
        )
        interrupting = self._config.slack.on_new_message is OnNewMessage.INTERRUPT
        await self._run_spec(spec, abort, interrupting=interrupting)

    async def after_decision(self, turn: DecisionTurn, abort: asyncio.Event) -> None:
        """Tell the thread what a decision led to: a turn on the decision's note, under
        what the turn that proposed the change was admitted under, judged again under the
        configuration running now (nothing it still grants: the thread is only settled)."""
        admitted = await self._admission(turn.approval.turn_id)
        found = await self._binding(turn.session, admitted, turn.turn_id)
        if found is None:
            await self.settle(turn.session.id)
            return
        binding, admission = found
        origin = TurnOrigin(turn.approval.requested_by)
        spec = _TurnSpec(
            turn.session, binding, turn.turn_id, origin, turn.note, admission=admission
        )
        await self._run_spec(spec, abort)

    async def take_over(
        self, session_id: int, turn_id: str, asker: str
    ) -> tuple[str, TurnBody] | None:
        """A turn accepted by a replica that died before running it: its session key and
        its body, which runs it here from the stored conversation (its message included),
        under what its message was admitted under, judged again under the configuration
        running now; None if its session is gone or nothing it was admitted for is."""
        session = await self._sessions.get(session_id)
        if session is None:
            return None
        found = await self._binding(session, await self._admission(turn_id), turn_id)
        if found is None:
            return None
        spec = _TurnSpec(session, found[0], turn_id, TurnOrigin(asker), None)
        return session.session_key, lambda abort: self._run_spec(spec, abort)

    async def turn_binding(self, session: SessionInfo, turn_id: str) -> ChannelBinding | None:
        """What the turn runs under now (`_binding`): an approval's re-check at a click."""
        found = await self._binding(session, await self._admission(turn_id), turn_id)
        return found[0] if found is not None else None

    async def _admission(self, turn_id: str) -> Admission | None:
        return await self._ledger.admission(turn_id) if self._ledger is not None else None

    async def _binding(
        self, session: SessionInfo, admitted: Admission | None, turn_id: str
    ) -> tuple[ChannelBinding, Admission] | None:
        """What a turn run now (not where its message was admitted) runs under: what it was
        admitted under (a turn stored before turns kept that: its session's), never more
        than the configuration running now gives the same person in the same channel (a
        channel given less since gives its old threads less too). With it, the admission
        a turn it starts keeps."""
        admitted = admitted or Admission(session.role, session.cluster, session.namespace)
        role = self._config.roles.get(admitted.role)
        if role is None:
            log.warning("turn %s: its role %s is gone from the config", turn_id, admitted.role)
            return None
        binding = ChannelBinding(admitted.role, role, admitted.cluster, admitted.namespace)
        if self._bindings is not None:
            now = await self._bindings.current(session, external=admitted.external)
            judged = narrower(binding, now, self._registry.all()) if now is not None else None
            if judged is None:
                log.warning("turn %s: the config no longer grants %s", turn_id, admitted)
                return None
            if judged != binding:
                log.info(
                    "turn %s runs as %s (admitted as %s)", turn_id, judged.role_name, admitted.role
                )
            binding = judged
        return binding, Admission(
            binding.role_name, binding.cluster, binding.namespace, admitted.external
        )

    async def _run_spec(
        self, spec: _TurnSpec, abort: asyncio.Event, *, interrupting: bool = False
    ) -> None:
        async with self._owning(spec, abort, interrupting=interrupting) as ending:
            if ending is None:
                # Stopped while it was queued (or taken over): it never runs, shows nothing.
                log.info("turn %s is no longer queued here; not run", spec.turn_id)
                return
            async with self._reporting(spec, ending) as reporter:
                # Turns that began before this one, then this turn's own (stored) opening;
                # with none, everything stored (a turn taken over: its message is stored
                # with it).
                before = spec.turn_id if spec.opening is not None else None
                history = (
                    None  # loaded by the tier's budget once the turn's prompt is known
                    if self._compactor is not None
                    else await self._conversation.history(
                        spec.session.id, self._config.agent.history_messages, before_turn=before
                    )
                )
                ending.state = await self._turn(spec, reporter, history, abort, ending)

    @contextlib.asynccontextmanager
    async def _owning(
        self, spec: _TurnSpec, abort: asyncio.Event, *, interrupting: bool = False
    ) -> AsyncIterator[_Ending | None]:
        """The turn's row: claimed as running here once no other turn of its thread runs
        (on any replica), and given its final state when the turn ends; None (the turn
        must not run) when it is no longer queued here: a person stopped it meanwhile. A
        shutdown (a cancel without an abort) leaves it live: its lease expires and whoever
        takes it over (another replica, or this one restarted) closes it in the thread.
        `interrupting`: a person's new message, which interrupts a turn running on another
        replica."""
        ending = _Ending()
        ledger = self._ledger
        if ledger is None:
            yield ending
            return
        session_id, turn_id = spec.session.id, spec.turn_id
        try:
            # The turn it waits for may run in another process: the table decides, asked
            # again when a turn ends (a wake-up) or at the next poll.
            with self._wakeups.watch(Wake.TURN_ENDED) as ended:
                while (claim := await self._claim(ledger, spec)) is TurnClaim.WAIT:
                    if interrupting:
                        interrupting = not await ledger.request_interrupt(session_id)
                    await ended.wait(self._claim_poll_s)
            if claim is TurnClaim.GONE:
                yield None  # its row already holds how it ended (the stop wrote it)
                return
            yield ending
        except asyncio.CancelledError:
            if not abort.is_set():
                raise
            ending.state = TurnState.INTERRUPTED
            await asyncio.shield(self._finish(ledger, turn_id, ending))
            raise
        except Exception:
            ending.state = TurnState.FAILED
            await self._finish(ledger, turn_id, ending)
            raise
        await self._finish(ledger, turn_id, ending)

    @staticmethod
    async def _claim(ledger: TurnLedger, spec: _TurnSpec) -> TurnClaim:
        if spec.claimed:  # recorded running with its message (`TurnLedger.begin`)
            return TurnClaim.RUNNING
        return await ledger.claim(spec.session.id, spec.turn_id, spec.origin.asker, spec.admission)

    async def _finish(self, ledger: TurnLedger, turn_id: str, ending: _Ending) -> None:
        """The turn's end, retried while the store fails (a turn left running would hold
        its thread); if it still cannot be stored, the turn is released: its lease lapses
        and the takeover closes it in its thread with a note."""
        # From here on, a closing call that goes out is recorded on its own (`sent`).
        ending.finished = True
        try:
            await retrying(
                f"recording that turn {turn_id} ended",
                lambda: ledger.finish(turn_id, ending.state, ending.closed, ending.closing),
                self._finish_delays,
                self._sleep,
            )
        except Exception:
            log.exception("could not record that turn %s ended (%s)", turn_id, ending.state)
            ledger.release(turn_id)
        except asyncio.CancelledError:
            # Stopped while retrying (its leases lapsed, or a shutdown): let it go as well.
            ledger.release(turn_id)
            raise

    @contextlib.asynccontextmanager
    async def _reporting(self, spec: _TurnSpec, ending: _Ending) -> AsyncIterator[Reporter]:
        """The turn's reporter, closed whenever the turn ends, even when an interrupt lands
        in its first milliseconds (while the reporter is still opening): no stream or
        progress message is ever left unfinished. The turn does not wait for it to open."""
        messages = _LedgerMessages(self._ledger, spec.turn_id, ending)
        origin = replace(spec.origin, turn_id=spec.turn_id)
        reporter = _OpeningReporter(self._reporters.open(spec.session, origin, messages))
        try:
            yield reporter
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                opened = await asyncio.shield(reporter.opening)
                await asyncio.shield(self._close_interrupted(opened))
            raise

    @staticmethod
    async def _close_interrupted(reporter: Reporter) -> None:
        await reporter.close(TurnFinished(TurnFinish.INTERRUPTED, "", TurnStats(model="")))

    async def _turn(
        self,
        spec: _TurnSpec,
        reporter: Reporter,
        history: list[Message] | None,
        abort: asyncio.Event,
        ending: _Ending,
    ) -> TurnState:
        session, origin, binding = spec.session, spec.origin, spec.binding
        logs.bind(session_id=session.id, turn_id=spec.turn_id)  # this turn's task only
        tools = offered_tools(binding.role, self._registry.all())
        policy = await self._policy(tools)
        cluster = next(c for c in self._config.kubernetes.clusters if c.name == binding.cluster)
        opening = (
            await self._openings.first_user_message(session.id)
            if self._openings is not None
            else None
        )
        knowledge = await knowledge_for(
            self._knowledge,
            binding.tool_context(),
            frozenset(tool.name for tool in tools),
            [opening, spec.opening],
        )
        prompt = system_prompt(
            PromptContext(
                role_name=binding.role_name,
                cluster=binding.cluster,
                cluster_description=cluster.description,
                default_namespace=binding.namespace,
                allowed_namespaces=list(binding.role.namespaces),
                rules=self._config.agent.rules,
                knowledge=knowledge,
            ),
            tools,
            policy,
        )
        scope = CallScope(
            session_id=session.id,
            session_key=session.session_key,
            channel_id=session.channel_id,
            slack_user=origin.asker,
            role_name=binding.role_name,
            role=binding.role,
            tool_context=binding.tool_context(),
            offered=frozenset(tool.name for tool in tools),
            abort=abort,
            user_request=origin.text,
            turn_id=spec.turn_id,
        )
        if history is None:
            history = await self._compacted(spec, policy, prompt, opening)
        request = TurnRequest(
            session=session,
            turn_id=spec.turn_id,
            system_prompt=prompt,
            history=history,
            user_message=spec.opening,
            tools=tools,
            scope=scope,
            policy=policy,
            opening=opening,
        )
        try:
            return await self._run(request, reporter, session.id, ending)
        finally:
            await self._hooks.session_end(_hook_info(session, origin.asker, binding, spec.turn_id))

    async def _compacted(
        self,
        spec: _TurnSpec,
        policy: ResolvedAgentPolicy,
        prompt: str,
        opening: Message | None,
    ) -> list[Message]:
        """The history within what the engine's trim allows (`trim_history`: a strict
        budget also counts the prompt and this turn's message), less the thread's opening,
        which the engine always keeps."""
        assert self._compactor is not None
        available = policy.history_chars - len((opening.content or "") if opening else "")
        if policy.history_strict:
            available -= len(prompt) + len((spec.opening.content or "") if spec.opening else "")
        before = spec.turn_id if spec.opening is not None else None
        return await self._compactor.history(spec.session.id, before, available)

    async def _run(
        self, request: TurnRequest, reporter: Reporter, session_id: int, ending: _Ending
    ) -> TurnState:
        try:
            # An interruption (CancelledError) passes through: `_reporting` closes for it.
            finished = await self._engine.run_turn(request, reporter.emit)
            # The engine says whether this turn ended at its own card (its stored state);
            # the thread's status waits on any card of the session.
            ended_at_card = finished.awaiting_approval
            finished = replace(finished, awaiting_approval=await self._awaiting(session_id))
        except Exception:
            log.exception("turn %s failed", request.turn_id)
            failed = TurnFinished(
                TurnFinish.ERROR,
                "",
                TurnStats(model=""),
                error="Something went wrong on kelpie's side; the details are in its log.",
            )
            await reporter.close(failed)
            return TurnState.FAILED
        stats = finished.stats
        log.info(
            "turn finished: %s, %d rounds, %d tool calls, %d/%d tokens, %.1f s",
            finished.finish.value,
            stats.rounds,
            stats.tool_calls,
            stats.input_tokens,
            stats.output_tokens,
            stats.duration_s,
        )
        # A complete answer is stored (the engine's last commit): the messages closed from
        # here on are recorded with the turn's end, one commit for both.
        ending.answered = finished.finish in (TurnFinish.STOP, TurnFinish.MAX_ITERATIONS)
        await reporter.close(finished)
        if ended_at_card:
            return TurnState.AWAITING_APPROVAL
        return _FINAL_STATES[finished.finish]

    async def settle(self, session_id: int) -> None:
        """Nothing runs in the session after a decision: the front end shows it idle (or
        still waiting, when another card waits)."""
        session = await self._sessions.get(session_id)
        if session is not None:
            awaiting = await self._awaiting(session_id)
            await self._reporters.settle(session, awaiting_approval=awaiting)

    async def _awaiting(self, session_id: int) -> bool:
        if self._waiting is None:
            return False
        try:
            return bool(await self._waiting.pending_in(session_id))
        except Exception:
            # Only the thread's status depends on it: the answer still goes out.
            log.exception("could not look up the approvals waiting in session %s", session_id)
            return False


_FINAL_STATES = {
    TurnFinish.STOP: TurnState.DONE,
    TurnFinish.MAX_ITERATIONS: TurnState.DONE,
    TurnFinish.INTERRUPTED: TurnState.INTERRUPTED,
    TurnFinish.ERROR: TurnState.FAILED,
}


@dataclass(frozen=True)
class _LedgerMessages:
    """Implements `TurnMessages` for one turn, in the turn ledger (none: not recorded).
    Once the turn's answer is stored, a message it closes is recorded with the turn's end
    (`TurnLedger.finish`) rather than in a commit of its own."""

    ledger: TurnLedger | None
    turn_id: str
    ending: _Ending

    async def opened(self, ts: str) -> None:
        if self.ledger is not None:
            await _recording(self.ledger.message_opened(self.turn_id, ts), ts)

    async def closed(self, ts: str) -> None:
        if self.ending.answered:
            self.ending.closed.append(ts)
        elif self.ledger is not None:
            await _recording(self.ledger.message_closed(self.turn_id, ts), ts)

    def deferred(self, calls_json: str) -> None:
        self.ending.closing = calls_json

    def sent(self, closed: Sequence[str]) -> None:
        if not self.ending.finished:
            # Out before the turn's end is recorded: its end records nothing left to send.
            self.ending.closing = None
            self.ending.closed.extend(closed)
        elif self.ledger is not None:
            self.ledger.closing_sent(self.turn_id, closed)


async def _recording(write: Awaitable[None], ts: str) -> None:
    try:
        await write
    except Exception:
        # Only a crash's clean-up depends on it: the turn goes on.
        log.exception("could not record the state of message %s", ts)


class _OpeningReporter:
    """A reporter the turn can use while it is still opening. Opening posts the turn's
    first message, which may wait seconds for the channel's posting budget (Slack takes
    about one post a second per channel); the model is asked meanwhile. Events are held in
    order and handed on once it is open. If opening failed, the next event raises its
    error, so the turn stops before running anything more that nobody would see."""

    def __init__(self, opening: Awaitable[Reporter]) -> None:
        self._held: deque[TurnEvent] = deque()
        self._open: Reporter | None = None
        self.opening: asyncio.Future[Reporter] = asyncio.ensure_future(self._hand_on(opening))

    async def _hand_on(self, opening: Awaitable[Reporter]) -> Reporter:
        reporter = await opening
        while self._held:  # an event emitted while one is handed on waits its turn
            await reporter.emit(self._held.popleft())
        self._open = reporter
        return reporter

    async def emit(self, event: TurnEvent) -> None:
        if self._open is not None:
            await self._open.emit(event)
            return
        if self.opening.done():
            self.opening.result()  # opening failed: its error ends the turn
        self._held.append(event)

    async def close(self, finished: TurnFinished) -> None:
        await (await self.opening).close(finished)


@dataclass
class _Ending:
    """How the turn ended, filled in by its body: its state, whether its answer is stored,
    the messages closed since, and its closing calls left for later."""

    state: TurnState = TurnState.DONE
    answered: bool = False
    closed: list[str] = field(default_factory=list)
    # Its closing Slack calls left for later (JSON), recorded with its end.
    closing: str | None = None
    finished: bool = False  # its end is being (or was) recorded


def _hook_info(
    session: SessionInfo, user: str, binding: ChannelBinding, turn_id: str | None = None
) -> dict[str, object]:
    # The role and cluster the turn runs under (its own, not its session's).
    return {
        "session": session.session_key,
        "channel": session.channel_id,
        "user": user,
        "role": binding.role_name,
        "cluster": binding.cluster,
        "turn_id": turn_id,
    }
