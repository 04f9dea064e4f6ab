"""A write that checks its own effect: after an approved write ran, kelpie follows the
target for `agent.verify_s` (0: never) without holding anything up (a task of its own), and
then says ONE thing in the thread: "Recovered: …" with what it read, or "Not recovered: …"
with what is wrong, followed, when not, by a rollback card proposed by kelpie (a normal
approval: preview by dry run, four eyes, audit; nothing runs without a click).

The watch is a stored row (`WatchStore`), written before it starts and leased to the
replica following it (renewed at every poll). A restart, or another replica once that
lease expired, claims it and follows it again (reading the target at once; a deadline that
passed meanwhile ends it with that reading). The verdict is stored before it is said (the
one replica whose compare-and-set concludes the row says it), its message's ts after, and
only then is the watch done: a replica killed in between leaves a concluded watch whose
stored verdict the next one says (unless its ts shows it was said), and whose rollback
card, with an id derived from the approval's, it proposes unless it exists. So the thread
hears it once, even across kill -9. A verdict the thread refuses for good (`Undeliverable`:
its channel archived or deleted, the app removed) ends the watch undeliverable, stored with
the surface's reason and logged once: no rollback card goes where nothing can be posted, no
memory is offered for what nobody heard, and no reconciliation tries again. Any other
failure to say it leaves it concluded, for the next reconciliation. Time is injected
(`clock`, `sleep`): tests never wait.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol

from bot.approvals.model import ApprovalCards
from bot.errors import KelpieError, Undeliverable
from bot.pipeline.harness import ToolRegistry
from bot.store.verify import LeftWatch
from bot.toolsets.spec import Tool, ToolContext, bound_identity
from bot.values import Approval, ApprovalState, Effect, WritePlan

log = logging.getLogger(__name__)

# The tools whose effect is followed, and the tool that undoes each (None: nothing can).
FOLLOWED = {
    "scale_deployment": "scale_deployment",
    "restart_deployment": "rollback_deployment",
    "rollback_deployment": "rollback_deployment",
    "set_container_resources": "rollback_deployment",
    "delete_pod": None,
    "cordon_node": "uncordon_node",
    "uncordon_node": "cordon_node",
}
# Why a followed write has no undoing write (the verdict says so instead of a card).
NO_UNDO = {
    "delete_pod": "a deleted pod cannot be brought back (its controller, if any, makes a new one)",
}

# --- what the thread reads (one place) ---------------------------------------------------

RECOVERED = "Recovered: {what}: {evidence}."
NOT_RECOVERED = "Not recovered: {what}: {evidence}."
TIMED_OUT = " (still so after {seconds:.0f} s)"
RESUMED = " (The kelpie process following this change stopped; it was read again after that.)"
ROLLBACK_OFFERED = " A rollback is proposed on the card below; it runs only once approved."
NO_ROLLBACK = " No rollback card: {why}."
NOT_ALLOWED = "role {role} may not use {tool}"
UNPREPARED = "the rollback could not be prepared (logged)"
UNREADABLE = "the target could not be read ({error})"
GONE = "Not followed to the end: approval {id} is gone."
ROLLBACK_REASON = (
    "Proposed by kelpie: approval {id} ({what}) did not recover: {evidence}. Undoes it."
)
SLI_UNHEALTHY = "{query} = {value:g}, not below {limit:g}"
SLI_HEALTHY = "{query} = {value:g} (below {limit:g})"
SLI_UNREAD = "the SLI could not be read ({error})"


@dataclass(frozen=True)
class SliReading:
    query: str
    value: float | None  # None: could not be read (error says why)
    limit: float
    error: str = ""

    @property
    def healthy(self) -> bool:
        return self.value is not None and self.value < self.limit

    def render(self) -> str:
        if self.value is None:
            return SLI_UNREAD.format(error=self.error)
        text = SLI_HEALTHY if self.healthy else SLI_UNHEALTHY
        return text.format(query=self.query, value=self.value, limit=self.limit)


class Effects(Protocol):
    async def observe(self, plan: WritePlan) -> Effect: ...


class Slis(Protocol):
    async def check(self, approval: Approval) -> SliReading | None:
        """The role's (or namespace's) SLI now; None when none is configured."""
        ...

    async def close(self) -> None: ...


class NoSlis:
    async def check(self, approval: Approval) -> SliReading | None:
        return None

    async def close(self) -> None:
        pass


class WatchStore(Protocol):
    async def create(self, approval_id: str, deadline: datetime) -> bool: ...

    async def renew(self, approval_id: str) -> bool: ...

    async def conclude(self, approval_id: str, verdict: str) -> bool: ...

    async def said(self, approval_id: str, ts: str | None) -> None: ...

    async def finish(self, approval_id: str) -> bool: ...

    async def undeliverable(self, approval_id: str, error: str) -> bool: ...

    async def orphans(self) -> list[LeftWatch]: ...

    async def claim(self, approval_id: str) -> bool: ...

    async def release(self, approval_id: str) -> None: ...


class Approvals(Protocol):
    async def get(self, approval_id: str) -> Approval | None: ...


class Proposals(Protocol):
    """Stores an approval kelpie proposes and posts its card (`ApprovalRequests.propose`)."""

    async def propose(self, approval: Approval) -> bool: ...


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class WatchTime:
    """What a watch measures its deadline by and waits between readings with (tests move
    time on by hand)."""

    clock: Callable[[], datetime] = utcnow
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep


REAL_TIME = WatchTime()


@dataclass(frozen=True)
class Verdict:
    recovered: bool
    text: str
    evidence: str


class Rollbacks:
    """The card that undoes a change that did not recover, prepared like any write (its
    tool's own dry-run preview) and proposed through the approval flow."""

    def __init__(
        self,
        registry: ToolRegistry,
        proposals: Proposals,
        timeout_s: Callable[[str], float],
        allowed: Callable[[str, Tool], bool],
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        # (role, tool): whether the role may use it now; a card it could never run is noise
        # (the click re-checks everything anyway).
        self._allowed = allowed
        self._registry = registry
        self._proposals = proposals
        self._timeout_s = timeout_s
        self._clock = clock

    async def prepare(self, approval: Approval, evidence: str) -> Approval | str:
        """The rollback approval (not stored yet); or why there is none."""
        plan = approval.plan
        undo = FOLLOWED.get(plan.tool)
        tool = self._registry.get(undo) if undo else None
        if tool is None or tool.write is None:
            return NO_UNDO.get(plan.tool, f"{plan.tool} cannot be undone by a write kelpie has")
        if not self._allowed(approval.role, tool):
            return NOT_ALLOWED.format(role=approval.role, tool=tool.name)
        args = undo_args(plan)
        if args is None:
            return "the plan does not say what the target was before"
        context = ToolContext(plan.cluster, plan.target.namespace or None, bound_identity(plan))
        try:
            rollback = await tool.write.prepare(args, context)
        except KelpieError as error:  # the tool's own sentence (nothing to undo, no access)
            return str(error).rstrip(".")
        except Exception:
            log.exception("could not prepare the rollback of approval %s", approval.id)
            return UNPREPARED
        return Approval(
            id=rollback_id(approval.id),
            session_id=approval.session_id,
            turn_id=approval.turn_id,
            tool_call_id=f"verify-{approval.id[:8]}",
            plan=rollback,
            reason=ROLLBACK_REASON.format(
                id=approval.id[:8], what=plan.description, evidence=evidence
            ),
            role=approval.role,
            channel_id=approval.channel_id,
            thread_ts=approval.thread_ts,
            # Whoever asked for the change is asking for its undoing: four eyes still hold.
            requested_by=approval.requested_by,
            status=ApprovalState.PENDING,
            expires_at=self._clock() + timedelta(seconds=self._timeout_s(approval.role)),
            requesters=approval.requesters,
        )

    async def propose(self, rollback: Approval) -> None:
        if not await self._proposals.propose(rollback):
            log.warning("the rollback card %s could not be posted", rollback.id)


def rollback_id(approval_id: str) -> str:
    """The one rollback card an approval can have: proposed again after a crash, it is
    found by this id rather than posted twice."""
    return uuid.uuid5(uuid.NAMESPACE_URL, f"kelpie:rollback:{approval_id}").hex


def undo_args(plan: WritePlan) -> dict[str, object] | None:
    """The undoing tool's arguments: the node again, the previous replica count, or the
    previous revision."""
    if plan.tool in ("cordon_node", "uncordon_node"):
        return {"name": plan.target.name}
    where = {"namespace": plan.target.namespace, "name": plan.target.name}
    if plan.tool == "scale_deployment":
        try:
            return where | {"replicas": int(plan.changes[0].before)}
        except (IndexError, ValueError):
            return None
    revision = plan.args.get("from_revision")
    return where | {"revision": revision} if isinstance(revision, int) else None


# Told that an approved write recovered: the approval and the verdict's sentence. Awaited
# before the watch ends, and told again by whoever takes a watch over that ended between
# the two, so a hook must be idempotent (a memory offer is reserved once per resolution).
Recovered = Callable[[Approval, str], Awaitable[None]]


class Verifier:
    """Follows approved writes' effects; `ApprovalService` stores, starts and resumes."""

    def __init__(
        self,
        store: WatchStore,
        approvals: Approvals,
        effects: Effects,
        cards: ApprovalCards,
        rollbacks: Rollbacks,
        *,
        verify_s: float,
        poll_s: float,
        slis: Slis | None = None,
        time: WatchTime = REAL_TIME,
        recovered: list[Recovered] | None = None,
    ) -> None:
        self._store = store
        # Told of each write that recovered (after the thread heard it): memory offers.
        self._recovered = recovered if recovered is not None else []
        self._approvals = approvals
        self._effects = effects
        self._cards = cards
        self._rollbacks = rollbacks
        self._verify_s = verify_s
        self._poll_s = poll_s
        self._slis = slis or NoSlis()
        self._clock = time.clock
        self._sleep = time.sleep
        self._tasks: dict[str, asyncio.Task[None]] = {}

    async def store(self, approval: Approval) -> datetime | None:
        """Store the watch of a write that ran; its deadline, or None when not followed."""
        if self._verify_s <= 0 or approval.plan.tool not in FOLLOWED:
            return None
        deadline = self._clock() + timedelta(seconds=self._verify_s)
        try:
            created = await self._store.create(approval.id, deadline)
        except Exception:
            log.exception("could not store the verification watch of %s", approval.id)
            return None
        return deadline if created else None

    def start(self, approval: Approval, deadline: datetime, *, resumed: bool = False) -> None:
        self._track(approval.id, self._watch(approval, deadline, resumed))

    def _track(self, approval_id: str, work: Coroutine[object, object, None]) -> None:
        task = asyncio.create_task(work, name=f"verify-{approval_id[:8]}")
        self._tasks[approval_id] = task
        task.add_done_callback(lambda _: self._tasks.pop(approval_id, None))

    async def resume(self) -> None:
        """Watches a stopped process left (its lease expired): followed again here, or,
        when it had concluded, its stored verdict said."""
        for left in await self._store.orphans():
            if left.approval_id in self._tasks or not await self._store.claim(left.approval_id):
                continue
            approval = await self._approvals.get(left.approval_id)
            if approval is None:
                await self._store.conclude(left.approval_id, GONE.format(id=left.approval_id))
                await self._store.finish(left.approval_id)
            elif left.verdict is None:
                self.start(approval, left.deadline, resumed=True)
            else:
                self._track(approval.id, self._announce_left(approval, left))

    async def close(self) -> None:
        """Stop following (shutdown): the rows stay, so the next start resumes them."""
        followed = dict(self._tasks)
        for task in followed.values():
            task.cancel()
        await asyncio.gather(*followed.values(), return_exceptions=True)
        for approval_id in followed:
            try:
                await self._store.release(approval_id)
            except Exception:
                # Its lease lapses instead: resumed a lease later.
                log.warning("could not hand the verification watch of %s back", approval_id)
        await self._slis.close()

    async def _watch(self, approval: Approval, deadline: datetime, resumed: bool) -> None:
        try:
            effect = await self._follow(approval, deadline)
            if effect is None:
                return  # another replica follows it now
            verdict = await self._verdict(approval, effect, deadline)
            text, rollback = await self._conclusion(approval, verdict, resumed)
            # Stored before it is said: a crash from here on leaves it to be said once.
            if not await self._store.conclude(approval.id, text):
                return
            await self._announce(approval, text, rollback)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("the verification watch of approval %s failed", approval.id)

    async def _follow(self, approval: Approval, deadline: datetime) -> Effect | None:
        """Polls until the effect settles or fails, or the deadline passes; None when
        another replica took the watch over (this one's lease lapsed)."""
        while True:
            effect = await self._observe(approval.plan)
            left = (deadline - self._clock()).total_seconds()
            if effect.settled or effect.failed or left <= 0:
                return effect
            if not await self._store.renew(approval.id):
                return None
            await self._sleep(min(self._poll_s, left))

    async def _observe(self, plan: WritePlan) -> Effect:
        try:
            return await self._effects.observe(plan)
        except Exception as error:
            log.warning("could not read %s to verify it: %s", plan.target.key, error)
            return Effect(False, False, UNREADABLE.format(error=str(error).rstrip(".")))

    async def _verdict(self, approval: Approval, effect: Effect, deadline: datetime) -> Verdict:
        what = approval.plan.description
        evidence = effect.evidence
        if not effect.settled:
            if not effect.failed:
                evidence += TIMED_OUT.format(seconds=self._verify_s)
            return Verdict(False, NOT_RECOVERED.format(what=what, evidence=evidence), evidence)
        sli = await self._slis.check(approval)
        if sli is not None:
            evidence = f"{evidence}; {sli.render()}"
            # Unreadable: said beside the verdict; an outage is no reason to roll back.
            if sli.value is not None and not sli.healthy:
                return Verdict(False, NOT_RECOVERED.format(what=what, evidence=evidence), evidence)
        return Verdict(True, RECOVERED.format(what=what, evidence=evidence), evidence)

    async def _conclusion(
        self, approval: Approval, verdict: Verdict, resumed: bool
    ) -> tuple[str, Approval | None]:
        """The verdict's message and (not recovered) the rollback card to post below it."""
        text = verdict.text + (RESUMED if resumed else "")
        if verdict.recovered:
            return text, None
        rollback = await self._rollbacks.prepare(approval, verdict.evidence)
        if isinstance(rollback, str):
            return text + NO_ROLLBACK.format(why=rollback), None
        return text + ROLLBACK_OFFERED, rollback

    async def _announce(self, approval: Approval, text: str, rollback: Approval | None) -> None:
        """Say the concluded verdict, then post the rollback card below it (or, recovered,
        tell the hooks), then end; refused for good, end it unsaid, with neither."""
        try:
            ts = await self._cards.tell(approval, text)
        except Undeliverable as refused:
            log.warning(
                "the verdict on approval %s cannot be said, the thread refuses it for good"
                " (%s): the watch ends undeliverable",
                approval.id,
                refused.code,
            )
            await self._store.undeliverable(approval.id, refused.code)
            return
        except Exception:
            # Concluded, not said: handed back, so a later reconciliation says it.
            log.exception("could not say the verdict on approval %s", approval.id)
            await self._store.release(approval.id)
            return
        await self._store.said(approval.id, ts)
        await self._after_said(approval, text, rollback)

    async def _after_said(self, approval: Approval, said: str, rollback: Approval | None) -> None:
        """The verdict said: its rollback card, or (recovered) the hooks, then the end. A
        replica killed before the end leaves this to whoever takes the watch over."""
        if rollback is not None:
            await self._rollbacks.propose(rollback)
        if said.startswith(RECOVERED.split("{", 1)[0]):
            for hook in self._recovered:
                await self._tell_hook(hook, approval, said)
        await self._store.finish(approval.id)

    async def _tell_hook(self, hook: Recovered, approval: Approval, said: str) -> None:
        try:
            await hook(approval, said)
        except Exception:
            # The verdict was said: the watch still ends (a memory offer is not worth a
            # verdict said again).
            log.exception("a recovered hook failed for approval %s", approval.id)

    async def _announce_left(self, approval: Approval, left: LeftWatch) -> None:
        """A concluded watch whose replica died: its stored verdict said (unless it was)
        and its rollback card proposed (unless it exists), then it ends."""
        try:
            rollback = await self._left_rollback(approval, left)
            said = left.verdict or ""
            if left.said_ts is None:
                await self._announce(approval, said, rollback)
            else:
                await self._after_said(approval, said, rollback)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("could not end the verification watch of approval %s", approval.id)

    async def _left_rollback(self, approval: Approval, left: LeftWatch) -> Approval | None:
        """The rollback card the stored verdict offers, unless it was proposed already."""
        if left.verdict is None or not left.verdict.endswith(ROLLBACK_OFFERED):
            return None
        if await self._approvals.get(rollback_id(approval.id)) is not None:
            return None
        evidence = left.verdict.removesuffix(ROLLBACK_OFFERED).removesuffix(RESUMED)
        evidence = evidence.removeprefix(NOT_RECOVERED.split("{", 1)[0]).rstrip(".")
        prepared = await self._rollbacks.prepare(approval, evidence)
        return prepared if isinstance(prepared, Approval) else None
