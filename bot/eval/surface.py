"""The eval's in-process front end: the terminal surface's renderer on a captured console,
plus what a grader needs to see. Approval cards are recorded and never decided here; a
turn a decision would start is recorded and never run; the model gateway is tapped so the
grader sees what the model was sent and what it wrote before kelpie filtered it."""

from __future__ import annotations

import io
from dataclasses import dataclass, field

from bot.agent.events import ToolFinished, ToolStarted, TurnEvent, TurnFinished
from bot.agent.session import TurnMessages, TurnOrigin
from bot.agent.turns import TurnBody
from bot.model.types import ModelGateway, ModelReply, ModelRequest, TextSink
from bot.pipeline.roles import ChannelBinding, ChannelRoles
from bot.terminal import Console, TerminalReporter, approval_card, approval_state
from bot.values import Approval, SessionInfo

# The answer of a turn that ends at an approval card: nobody decides in an eval.
AWAITING_IN_EVAL = (
    "Waiting for approval: the eval records the proposed change and never approves it."
)


@dataclass
class Exchange:
    """One model request (as sent, after masking) and its reply (as the model wrote it)."""

    request: ModelRequest
    reply: ModelReply | None = None


@dataclass
class Capture:
    """Everything one session showed or sent, for the grader and the transcript."""

    console: io.StringIO = field(default_factory=io.StringIO)
    events: list[TurnEvent] = field(default_factory=list)
    finished: TurnFinished | None = None
    cards: list[Approval] = field(default_factory=list)
    card_text: list[str] = field(default_factory=list)
    exchanges: list[Exchange] = field(default_factory=list)
    later_turns: int = 0

    @property
    def tools_started(self) -> list[ToolStarted]:
        return [e for e in self.events if isinstance(e, ToolStarted)]

    @property
    def tools_finished(self) -> list[ToolFinished]:
        return [e for e in self.events if isinstance(e, ToolFinished)]


class Captures:
    """The capture of each session, by session key; one is current while a case runs (the
    model gateway has no session, and cases run one at a time)."""

    def __init__(self) -> None:
        self._by_key: dict[str, Capture] = {}
        self.current = Capture()

    def begin(self, session_key: str) -> Capture:
        self.current = self._by_key[session_key] = Capture()
        return self.current

    def of(self, session_key: str) -> Capture:
        return self._by_key.get(session_key) or self.current

    def of_channel(self, channel_id: str, thread_ts: str) -> Capture:
        for key, capture in self._by_key.items():
            if key.endswith(f":{channel_id}:{thread_ts}"):
                return capture
        return self.current


class _Reporter:
    def __init__(self, capture: Capture, model_name: str) -> None:
        self._capture = capture
        console = Console(stdin_fd=0, out=capture.console)
        self._inner = TerminalReporter(console, model_name)

    async def emit(self, event: TurnEvent) -> None:
        self._capture.events.append(event)
        await self._inner.emit(event)

    async def close(self, finished: TurnFinished) -> None:
        self._capture.finished = finished
        await self._inner.close(finished)


class EvalReporters:
    """ReporterFactory port: the terminal's rendering into the session's capture."""

    def __init__(self, captures: Captures, model_name: str) -> None:
        self._captures = captures
        self._model_name = model_name

    async def open(
        self, session: SessionInfo, origin: TurnOrigin, messages: TurnMessages
    ) -> _Reporter:
        return _Reporter(self._captures.of(session.session_key), self._model_name)

    async def settle(self, session: SessionInfo, *, awaiting_approval: bool) -> None:
        """Nothing is left open in an eval."""


class EvalCards:
    """ApprovalCards port: a proposed change is recorded as proposed, never approved."""

    def __init__(self, captures: Captures) -> None:
        self._captures = captures

    async def post(self, approval: Approval) -> str:
        capture = self._captures.of_channel(approval.channel_id, approval.thread_ts)
        capture.cards.append(approval)
        capture.card_text.append(approval_card(approval))
        return f"eval:{approval.id}"

    async def update(self, approval: Approval, note: str = "") -> None:
        capture = self._captures.of_channel(approval.channel_id, approval.thread_ts)
        capture.card_text.append(approval_state(approval, note))

    async def tell(self, approval: Approval, text: str) -> None:
        capture = self._captures.of_channel(approval.channel_id, approval.thread_ts)
        capture.card_text.append(text)


class EvalBindings:
    """Bindings port: each case's channel (`eval-<id>`) under the run's config."""

    def __init__(self, roles: ChannelRoles) -> None:
        self._roles = roles

    async def current(
        self, session: SessionInfo, *, external: bool = False
    ) -> ChannelBinding | None:
        return self._roles.bind(session.channel_id, session.channel_id, is_im=False)


class EvalApprovers:
    """Nobody approves in an eval."""

    async def is_approver(self, user: str, approval: object) -> bool:
        return False

    def describe(self, approval: object) -> str:
        return "nobody: kelpie eval never approves a change"


class DiscardedTurns:
    """TurnSubmit port: a turn after a decision (the runner only withdraws cards) is counted
    and never run."""

    def __init__(self, captures: Captures) -> None:
        self._captures = captures

    def submit(self, session_key: str, body: TurnBody, *, may_interrupt: bool = True) -> None:
        self._captures.of(session_key).later_turns += 1


class TappedGateway:
    """Records each request and reply of the model the engine talks to."""

    def __init__(self, inner: ModelGateway, captures: Captures) -> None:
        self._inner = inner
        self._captures = captures

    @property
    def model_name(self) -> str:
        return self._inner.model_name

    async def complete(self, request: ModelRequest, on_text: TextSink) -> ModelReply:
        exchange = Exchange(request)
        self._captures.current.exchanges.append(exchange)
        exchange.reply = await self._inner.complete(request, on_text)
        return exchange.reply
