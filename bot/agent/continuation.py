"""After an approval is decided: the outcome joins the conversation as a note, and a new
turn of the agent on that note (`DecisionTurn`) tells the thread. The turn that proposed
the write ended at the card; this is an ordinary new turn, queued behind any running one.
"""

from __future__ import annotations

import uuid
from typing import Protocol

from bot.agent.conversation import ConversationStore
from bot.agent.session import AgentSessions, DecisionTurn, SessionStore
from bot.agent.turns import TurnBody
from bot.values import Approval, ApprovalState, Message, Role

DECISION_PREFIX = "[kelpie, not a person: the decision on a proposed change] "


class TurnSubmit(Protocol):
    """Runs a session's next turn (the Slack scheduler, or the terminal's prompt loop)."""

    def __call__(
        self, session_key: str, body: TurnBody, *, may_interrupt: bool = ...
    ) -> object: ...


class DecisionTurns:
    """Implements the approval flow's `Continuation` port."""

    def __init__(
        self,
        conversation: ConversationStore,
        sessions: SessionStore,
        agent: AgentSessions,
        submit: TurnSubmit,
    ) -> None:
        self._conversation = conversation
        self._sessions = sessions
        self._agent = agent
        self._submit = submit

    async def record(self, approval: Approval, note: str, *, answer: bool) -> None:
        turn_id = uuid.uuid4().hex
        message = Message(Role.USER, DECISION_PREFIX + note)
        await self._conversation.append(approval.session_id, turn_id, [message])
        if not answer:
            # A withdrawal comes with its own turn (the requester's new message, or the
            # stopped turn's end), which shows the thread's status; anything else does not.
            if approval.status is not ApprovalState.CANCELLED:
                await self._agent.settle(approval.session_id)
            return
        session = await self._sessions.get(approval.session_id)
        if session is None:
            return
        turn = DecisionTurn(session, turn_id, approval, message)
        self._submit(
            session.session_key,
            lambda abort: self._agent.after_decision(turn, abort),
            may_interrupt=False,
        )
