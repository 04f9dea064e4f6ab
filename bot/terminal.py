"""`kelpie chat`: the same engine, security pipeline and approvals as in Slack, at a terminal.

Questions are typed at a prompt; each one is a turn of one session that lives in the
configured database like a Slack thread (team `terminal`, channel `terminal:<name>`, thread =
the chat's start time), so follow-ups carry the history. The role is the one the config gives
a channel of that name. Tool calls print as one line each, the answer streams as it arrives,
and a write asks for approval at the prompt: the answer goes to the approval service's
`decide()`, the same path a Slack click takes, so the write coordinator and its audits apply
unchanged. Only a person's answer typed at the prompt can approve; nothing the model writes
reaches `decide()`.

Four eyes hold as in Slack: where the role does not let the requester approve, the person
at the terminal (who asked) is told who may decide and how, and their change is withdrawn,
never offered a y/N the approval service would refuse. `kelpie chat --self-approve` is the
operator's explicit exception: they decide their own changes, and each decision is recorded
(approval, card and write audit) under a name that says it was self-approved.

stdin is read by one reader thread into a queue, so the event loop never blocks on it and a
prompt that is no longer wanted (an approval that expired) is cancelled cleanly.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import getpass
import io
import logging
import os
import re
import signal
import sys
import threading
import time
from typing import Protocol, TextIO

from bot.agent.events import (
    RoundStarted,
    TextDelta,
    ToolFinished,
    ToolStarted,
    TurnEvent,
    TurnFinish,
    TurnFinished,
    TurnStarted,
    footer_line,
    seen_stats,
)
from bot.agent.session import AgentSessions, IncomingMessage, TurnMessages, TurnOrigin
from bot.agent.takeover import LeaseKeeper
from bot.agent.turns import TurnBody
from bot.config import ApprovalConfig
from bot.errors import KelpieError
from bot.pipeline.roles import ChannelBinding, ChannelRoles
from bot.values import (
    Approval,
    ApprovalDecision,
    ApprovalState,
    DecisionKind,
    SessionInfo,
    ToolStatus,
)

log = logging.getLogger(__name__)

TERMINAL_TEAM = "terminal"


def _login_name() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # a container user with no passwd entry
        return "terminal-user"


# Slack's mention syntax, shown at a terminal as the plain @name it stands for.
_MENTION = re.compile(r"<@([^<>|]+)(?:\|[^<>]*)?>")
# Control characters from the model or the cluster would drive the terminal itself (ANSI
# escapes recolour, move the cursor, rewrite lines already shown, set the clipboard; a
# carriage return overwrites a line): each is shown as its escape instead. Newline and tab
# stay.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _visible(text: str) -> str:
    text = text.replace("\r\n", "\n")
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group(0)):02x}", text)


# Who asks and who decides: the person at the terminal, who runs kelpie with the config's
# cluster credentials in hand.
TERMINAL_USER = _login_name()
PROMPT = "you> "
APPROVAL_PROMPT = "Approve this change? [y/N] "
# The answer of a turn that ended at an approval: the question comes at the prompt below
# (the terminal has no card to click).
WAITING_AT_PROMPT = (
    "Waiting for approval: nothing changes unless the change shown above is approved at "
    "the prompt. I will report the outcome here."
)
SELF_APPROVE_FLAG = "--self-approve"
QUIT_WORDS = frozenset({"/quit", "/exit"})

_STATUS_MARK = {
    ToolStatus.OK: "✓",
    ToolStatus.FAILED: "✗",
    ToolStatus.DENIED: "⛔",
    ToolStatus.PENDING: "⏸",
}


def terminal_decider(self_approve: bool) -> str:
    """The name a decision at the terminal is recorded under."""
    if self_approve:
        return f"{TERMINAL_USER} (self-approved with {SELF_APPROVE_FLAG})"
    return TERMINAL_USER


class ChannelNotEnabled(KelpieError):
    """The channel named for `kelpie chat` maps to no role."""


def terminal_binding(roles: ChannelRoles, channel_name: str | None) -> ChannelBinding:
    """The role of a channel with that id or name; none means a direct message (`im: true`)."""
    binding = roles.bind(channel_name or "", channel_name, is_im=channel_name is None)
    if binding is not None:
        return binding
    if channel_name is None:
        raise ChannelNotEnabled(
            "kelpie is not enabled in direct messages (the config maps them to no role); "
            "name a channel with --channel NAME."
        )
    raise ChannelNotEnabled(
        f"kelpie is not enabled in #{channel_name}: the config maps that channel to no role."
    )


class Console:
    """Lines from stdin and text to stdout, for one event loop."""

    def __init__(self, stdin_fd: int | None = None, out: TextIO | None = None) -> None:
        self._fd = sys.stdin.fileno() if stdin_fd is None else stdin_fd
        self._out = out or sys.stdout
        if isinstance(self._out, io.TextIOWrapper):
            # An unencodable character must never end the chat.
            self._out.reconfigure(errors="replace")
        self._echoes = os.isatty(self._fd)
        self._lines: asyncio.Queue[str | None] | None = None
        self._eof = False
        self._at_line_start = True

    def start(self) -> None:
        """Start the reader thread (once), bound to the running loop."""
        if self._lines is not None:
            return
        loop = asyncio.get_running_loop()
        lines: asyncio.Queue[str | None] = asyncio.Queue()
        self._lines = lines

        def put(item: str | None) -> bool:
            try:
                loop.call_soon_threadsafe(lines.put_nowait, item)
            except RuntimeError:  # the loop is closed: kelpie is exiting
                return False
            return True

        def read() -> None:
            decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
            pending = ""
            while True:
                try:
                    chunk = os.read(self._fd, 4096)
                except OSError:
                    chunk = b""
                if not chunk:
                    if pending:
                        put(pending)
                    put(None)
                    return
                pending += decoder.decode(chunk)
                while "\n" in pending:
                    line, pending = pending.split("\n", 1)
                    if not put(line.rstrip("\r")):
                        return

        # A daemon thread: blocked in read() it never holds kelpie's exit back.
        threading.Thread(target=read, name="kelpie-stdin", daemon=True).start()

    def end_input(self) -> None:
        """Make the next (or pending) read return None, as at end of input."""
        if self._lines is not None:
            self._lines.put_nowait(None)
        else:
            self._eof = True

    async def read_line(self, prompt: str) -> str | None:
        """One line typed after `prompt`; None at end of input (Ctrl-D) from then on."""
        if self._eof:
            return None
        if self._lines is None:
            self.start()
        assert self._lines is not None
        self.line_start()
        self.write(prompt)
        line = await self._lines.get()
        if line is None:
            self._eof = True
            self.write("\n")
        elif self._echoes:
            self._at_line_start = True  # the terminal echoed the Enter
        else:
            self.write(f"{line}\n")
        return line

    def write(self, text: str) -> None:
        if not text:
            return
        self._out.write(_MENTION.sub(r"@\1", _visible(text)))
        self._out.flush()
        self._at_line_start = text.endswith("\n")

    def line_start(self) -> None:
        if not self._at_line_start:
            self.write("\n")

    def line(self, text: str) -> None:
        """A whole line of its own."""
        self.line_start()
        self.write(f"{text}\n")


class TerminalReporter:
    """One turn at the terminal: a line per tool call, the answer streamed, a footer."""

    def __init__(self, console: Console, model_name: str) -> None:
        self._console = console
        self._model_name = model_name
        self._turn_started: TurnStarted | None = None
        self._args: dict[str, str] = {}
        self._rounds = 0
        self._tool_calls = 0
        self._any_text = False
        self._in_text = False
        self._started = time.monotonic()

    async def emit(self, event: TurnEvent) -> None:
        if isinstance(event, TurnStarted):
            self._turn_started = event
        elif isinstance(event, RoundStarted):
            self._rounds = max(self._rounds, event.round_index + 1)
            self._in_text = False
        elif isinstance(event, TextDelta):
            if not event.text:
                return
            if not self._in_text:
                self._console.line_start()
                if self._any_text:
                    self._console.write("\n")
                self._in_text = True
            self._any_text = True
            self._console.write(event.text)
        elif isinstance(event, ToolStarted):
            self._in_text = False
            self._args[event.tool_call_id] = event.args_summary
            self._console.line(f"  · {_call(event.name, event.args_summary)} …")
        elif isinstance(event, ToolFinished):
            self._in_text = False
            self._tool_calls += 1
            mark = _STATUS_MARK.get(event.status, "?")
            call = _call(event.name, self._args.get(event.tool_call_id, ""))
            summary = f" · {event.summary}" if event.summary else ""
            self._console.line(f"  {mark} {call}{summary}")
            if event.picture is not None:
                # A terminal shows no image: what it would show, and its caption.
                self._console.line(f"    (a graph, shown in Slack only) {event.picture.caption}")

    async def close(self, finished: TurnFinished) -> None:
        console = self._console
        console.line_start()
        if finished.finish is TurnFinish.ERROR:
            console.line(f"⚠ {finished.error or 'Something went wrong on kelpie’s side.'}")
        elif finished.finish is TurnFinish.INTERRUPTED:
            console.line("Interrupted.")
        else:
            if not self._any_text:
                console.line(finished.answer.strip() or "(The model returned an empty answer.)")
            if finished.stats.cut:
                console.line("(The answer was cut at the output limit; ask me to go on.)")
            elif finished.finish is TurnFinish.MAX_ITERATIONS:
                console.line("(I used all my tool rounds for this question; this is what I found.)")
        stats = finished.stats
        if not stats.model:  # an interrupted turn reports no stats: show what was seen
            stats = seen_stats(
                self._turn_started,
                self._model_name,
                self._rounds,
                self._tool_calls,
                time.monotonic() - self._started,
            )
        console.line(f"  [{footer_line(stats, finished.evidence)}]")


def _call(name: str, args: str) -> str:
    return f"{name} {args}" if args else name


class TerminalReporters:
    """ReporterFactory port for the terminal."""

    def __init__(self, console: Console, *, model_name: str) -> None:
        self._console = console
        self._model_name = model_name

    async def open(
        self, session: SessionInfo, origin: TurnOrigin, messages: TurnMessages
    ) -> TerminalReporter:
        # A console keeps no message open: nothing is left to close after a crash.
        return TerminalReporter(self._console, self._model_name)

    async def settle(self, session: SessionInfo, *, awaiting_approval: bool) -> None:
        """The prompt itself shows whether anything waits: nothing to update."""


def approval_card(approval: Approval) -> str:
    plan = approval.plan
    target = plan.target
    changes = [f"    {change.render()}" for change in plan.changes] or ["    (no field changes)"]
    where = f"{target.namespace or '-'}/{target.name}"
    lines = [
        f"Approval needed: {plan.description}",
        f"  where:   cluster {plan.cluster} · {target.kind} {where}",
        f"  tool:    {plan.tool}",
        f"  preview ({plan.preview}):",
        *changes,
        *(f"  warning: {note}" for note in plan.notes),
    ]
    if approval.reason:
        lines.append(f"  reason:  {approval.reason}")
    expires = approval.expires_at.astimezone().strftime("%H:%M:%S")
    lines.append(f"  expires {expires} · approval {approval.id[:8]}")
    return "\n".join(lines)


def approval_state(approval: Approval, note: str = "") -> str:
    status = approval.status
    if status is ApprovalState.APPROVED:
        text = f"  Approved by {approval.decided_by or TERMINAL_USER}"
    elif status is ApprovalState.REJECTED:
        text = "  ⛔ Rejected: not executed."
    elif status is ApprovalState.EXPIRED:
        text = "  ⏰ Expired with no decision: not executed."
    elif status is ApprovalState.CANCELLED:
        text = f"  ✗ Withdrawn by {approval.decided_by or TERMINAL_USER}: not executed."
    else:
        text = "  Waiting for approval"
    if approval.outcome:
        text += f" · outcome: {approval.outcome}"
    if note:
        text += f" · {note}"
    return text


class TerminalApprovalCards:
    """ApprovalCards port at the terminal: prints the card and each state change. The chat
    asks y/N itself once the turn has ended at the card; a decision that lands while it asks
    (the expiry) cancels the question."""

    def __init__(self, console: Console) -> None:
        self._console = console
        self.asking: dict[str, asyncio.Task[str | None]] = {}

    async def post(self, approval: Approval) -> str:
        self._console.line(approval_card(approval))
        return f"terminal:{approval.id}"

    async def update(self, approval: Approval, note: str = "") -> None:
        asking = self.asking.get(approval.id)
        if approval.status is not ApprovalState.PENDING and asking is not None:
            asking.cancel()  # decided elsewhere (expired): the question is no longer open
        self._console.line(approval_state(approval, note))

    async def tell(self, approval: Approval, text: str) -> str | None:
        self._console.line(f"  {text}")
        return None


class FixedBinding:
    """The terminal's binding: the role the config gives the named channel, fixed."""

    def __init__(self, binding: ChannelBinding) -> None:
        self._binding = binding

    async def current(
        self, session: SessionInfo, *, external: bool = False
    ) -> ChannelBinding | None:
        return self._binding


class TerminalApprovers:
    """At the terminal the person running kelpie (with the cluster credentials) decides,
    within the four-eyes rule the approval service applies before asking this."""

    async def is_approver(self, user: str, approval: ApprovalConfig) -> bool:
        return True

    def describe(self, approval: ApprovalConfig) -> str:
        """Who may decide, and how, seen from a terminal."""
        people = [f"Slack user {user}" for user in approval.approvers.users]
        people += [f"members of Slack group {group}" for group in approval.approvers.usergroups]
        slack = (
            f"{', '.join(people)}, when it is asked in a Slack channel with this role"
            if people
            else "nobody in Slack (this role names no approvers)"
        )
        return (
            f"{slack}; or you, here, if you start `kelpie chat` again with "
            f"{SELF_APPROVE_FLAG} (recorded in the audit as self-approved)"
        )


class TerminalTurns:
    """The terminal's `TurnSubmit`: turns after a decision queue here and the prompt loop
    runs them in order, so output never interleaves with a question."""

    def __init__(self) -> None:
        self.queued: list[TurnBody] = []

    def submit(self, session_key: str, body: TurnBody, *, may_interrupt: bool = True) -> None:
        self.queued.append(body)


class Decisions(Protocol):
    async def pending_in(self, session_id: int) -> list[Approval]: ...

    async def resume(self, approval_id: str, decision: ApprovalDecision) -> object: ...

    async def may_decide(self, approval: Approval, user: str) -> str | None: ...


class Runtime(Protocol):
    """The shared core's lifecycle (the database, hooks, cluster clients)."""

    async def start(self) -> None: ...

    async def close(self) -> None: ...


class LeaseRenewal(Protocol):
    async def renew_leases(self) -> None: ...


class ApprovalLeases:
    """`kelpie chat`'s heartbeat (a `LeaseKeeper`'s): it holds no turn leases (its turns
    are its own, never taken over by a replica), but an approved change executing here is
    leased to it like one in `kelpie run`; renewed while it lives, so a `kelpie run` on the
    same database never reconciles a write still in flight here, however long it takes."""

    def __init__(self, store: LeaseRenewal) -> None:
        self._store = store

    async def renew(self) -> None:
        await self._store.renew_leases()

    def lapsed(self) -> None:
        """Its approved changes are fenced at their write; no turn is leased."""

    async def take_over(self) -> None:
        """A terminal takes nothing over (`kelpie run` does)."""

    async def interrupts(self) -> None:
        """No other replica interrupts a terminal's turn."""


class KeptRuntime:
    """The core with its heartbeat: beating from start until close."""

    def __init__(self, core: Runtime, keeper: LeaseKeeper) -> None:
        self._core = core
        self._keeper = keeper

    async def start(self) -> None:
        await self._core.start()
        self._keeper.start()

    async def close(self) -> None:
        await self._keeper.stop()
        await self._core.close()


class TerminalChat:
    """The prompt loop: each question is a turn; Ctrl-C stops a running turn (at the prompt
    it ends the chat), /quit or Ctrl-D ends the chat."""

    def __init__(
        self,
        console: Console,
        agent: AgentSessions,
        binding: ChannelBinding,
        channel_name: str | None,
        runtime: Runtime,
        decisions: Decisions,
        turns: TerminalTurns,
        cards: TerminalApprovalCards,
        *,
        decider: str = TERMINAL_USER,
    ) -> None:
        self._decider = decider
        self._decisions = decisions
        self._turns = turns
        self._cards = cards
        self._asking: asyncio.Task[str | None] | None = None
        self._ctrl_c = False
        self._console = console
        self._agent = agent
        self._binding = binding
        self._channel_name = channel_name
        self._runtime = runtime
        self._channel_id = f"terminal:{channel_name or 'dm'}"
        self._thread_ts = f"{time.time():.6f}"
        self._running: tuple[asyncio.Task[None], asyncio.Event] | None = None

    @property
    def session_key(self) -> str:
        return f"{TERMINAL_TEAM}:{self._channel_id}:{self._thread_ts}"

    async def run(self) -> None:
        await self._runtime.start()
        loop = asyncio.get_running_loop()
        signals = []
        for sig, handler in ((signal.SIGINT, self._on_interrupt), (signal.SIGTERM, self._quit)):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, handler)
                signals.append(sig)
        try:
            self._console.start()
            self._console.line(self._banner())
            while True:
                line = await self._console.read_line(PROMPT)
                if line is None:
                    break
                text = line.strip()
                if not text:
                    continue
                if text.lower() in QUIT_WORDS:
                    break
                await self._turn(text)
        finally:
            for sig in signals:
                loop.remove_signal_handler(sig)
            await self._runtime.close()

    def _banner(self) -> str:
        binding = self._binding
        where = f"#{self._channel_name}" if self._channel_name else "direct message"
        parts = [
            f"kelpie chat · {where}",
            f"role {binding.role_name}",
            f"cluster {binding.cluster}",
        ]
        if binding.namespace:
            parts.append(f"namespace {binding.namespace}")
        if self._decider != TERMINAL_USER:
            parts.append(f"{SELF_APPROVE_FLAG}: your decisions are recorded as self-approved")
        return (
            " · ".join(parts)
            + "\nAsk a question. Ctrl-C stops an answer; /quit or Ctrl-D ends the chat."
        )

    async def _turn(self, text: str) -> None:
        ts = f"{time.time():.6f}"
        message = IncomingMessage(
            team_id=TERMINAL_TEAM,
            channel_id=self._channel_id,
            channel_name=self._channel_name,
            is_dm=self._channel_name is None,
            thread_ts=self._thread_ts,
            ts=ts,
            user=TERMINAL_USER,
            text=text,
        )
        try:
            accepted = await self._agent.accept(message, self._binding)
        except Exception:
            log.exception("could not record the question")
            self._console.line(
                "⚠ kelpie could not record the question; the details are in its log."
            )
            return
        if accepted is None:  # only a replayed Slack delivery is refused; never here
            return
        await self._run(lambda abort: self._agent.run_turn(accepted, abort))
        await self._decide(accepted.session.id)

    async def _run(self, body: TurnBody) -> None:
        abort = asyncio.Event()
        task: asyncio.Task[None] = asyncio.ensure_future(body(abort))
        self._running = (task, abort)
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError:
            self._stop(task, abort)
            await asyncio.wait({task})
            raise
        finally:
            self._running = None
        if not task.cancelled() and task.exception() is not None:
            log.error("the turn failed", exc_info=task.exception())
            self._console.line(
                "⚠ Something went wrong on kelpie's side; the details are in its log."
            )

    async def _decide(self, session_id: int) -> None:
        """The turn ended at its approval cards: ask about each, then run the turns that
        answer the decisions. Ctrl-C at the question withdraws the card. A card this person
        may not decide (four eyes) is never asked about: they are told who may, and since
        they asked for it, it is withdrawn (a "no" from them would be refused as a rejection
        and asked again forever)."""
        while True:
            for approval in await self._decisions.pending_in(session_id):
                why = await self._decisions.may_decide(approval, self._decider)
                if why is not None:
                    self._console.line(f"  {why}")
                    kind: DecisionKind | None = DecisionKind.WITHDRAW
                else:
                    kind = await self._ask(approval.id)
                if kind is not None:
                    decision = ApprovalDecision(kind, self._decider)
                    await self._decisions.resume(approval.id, decision)
            if not self._turns.queued:
                return
            await self._run(self._turns.queued.pop(0))

    async def _ask(self, approval_id: str) -> DecisionKind | None:
        ask = asyncio.create_task(self._console.read_line(APPROVAL_PROMPT))
        self._asking, self._ctrl_c = ask, False
        self._cards.asking[approval_id] = ask
        try:
            answer = await ask
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
            # Ctrl-C withdraws the card; a decision that landed meanwhile (the expiry) is
            # already made and cancelled the question.
            self._console.line_start()
            return DecisionKind.WITHDRAW if self._ctrl_c else None
        finally:
            self._asking = None
            self._cards.asking.pop(approval_id, None)
        if answer is None:
            return DecisionKind.WITHDRAW
        yes = answer.strip().lower() in {"y", "yes"}
        return DecisionKind.APPROVE if yes else DecisionKind.REJECT

    @staticmethod
    def _stop(task: asyncio.Task[None], abort: asyncio.Event) -> None:
        """Interrupt a turn as a person would: a pending approval is cancelled, not left."""
        abort.set()
        task.cancel()

    def _on_interrupt(self) -> None:
        """Ctrl-C: stops the running turn; at an approval question, withdraws the card; at
        the prompt, ends the chat."""
        if self._asking is not None:
            self._ctrl_c = True
            self._asking.cancel()
        elif self._running is not None:
            self._stop(*self._running)
        else:
            self._console.end_input()

    def _quit(self) -> None:
        if self._running is not None:
            self._stop(*self._running)
        self._console.end_input()
