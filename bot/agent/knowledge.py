"""The port a turn asks for the team's knowledge to offer in its prompt (runbook and
past-incident titles; `bot/toolsets/knowledge/offers.py` fills it), and the thread's
subject it is matched on: the channel's namespace, the thread's opening and the question."""

from __future__ import annotations

import logging
from typing import Protocol

from bot.toolsets.knowledge.subject import ThreadSubject
from bot.toolsets.spec import ToolContext
from bot.values import Message

log = logging.getLogger(__name__)


class KnowledgeOffer(Protocol):
    async def offered(
        self, subject: ThreadSubject, context: ToolContext, tools: frozenset[str]
    ) -> str: ...


async def knowledge_for(
    offer: KnowledgeOffer | None,
    context: ToolContext,
    tools: frozenset[str],
    messages: list[Message | None],
) -> str:
    """The knowledge block for this turn's prompt ("" when there is none or it fails: a
    turn is never lost to its offering)."""
    if offer is None:
        return ""
    texts = [m.content for m in messages if m is not None and m.content]
    subject = ThreadSubject.of(context.default_namespace, texts)
    try:
        return await offer.offered(subject, context, tools)
    except Exception:
        log.exception("the team's knowledge could not be offered to this turn")
        return ""
