"""What happens to a decided approval's outcome when no turn is waiting for it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from bot.agent.conversation import ConversationStore, Message, Role
from bot.approvals.model import Approval
from bot.tools.harness import ToolOutcome

Resume = Callable[[Approval], Awaitable[None]]


class ConversationOrphans:
    """Records the outcome as the tool call's result (so the stored conversation stays
    paired) and, when asked, continues the turn from the stored conversation."""

    def __init__(self, conversation: ConversationStore) -> None:
        self._conversation = conversation
        # Bound by the composition root once the agent exists (the agent's harness needs the
        # approval service first, so this edge of the cycle is closed late, in one place).
        self.resume: Resume | None = None

    async def deliver(self, approval: Approval, outcome: ToolOutcome, *, resume: bool) -> None:
        result = Message(
            Role.TOOL,
            outcome.content,
            tool_call_id=approval.tool_call_id,
            tool_name=approval.plan.tool,
        )
        await self._conversation.append(approval.session_id, approval.turn_id, [result])
        if resume and self.resume is not None:
            await self.resume(approval)
