"""A finished turn's closing Slack calls, as data: what its thread must still be told once
the answer is out (the end's progress edit, the `eyes` reaction swapped, the agent session
or assistant status back to idle). While the workspace's Tier 3 budget has no room they go
out later, without holding the turn; the turn's end keeps them in the store meanwhile
(masked, as the Slack client would send them), and they are marked sent once Slack
accepted them. Whoever outlives the process that left them (itself restarted, or another
replica) sends what is still unsent (`bot/agent/takeover.py`). Sending twice changes nothing
in Slack: a reaction already gone or already there, a status already set, is what was
asked for."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence

from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.progress.common import SLACK_FAILURES, Background, Json, error_code

log = logging.getLogger(__name__)

# The calls a turn's end may leave for later, and the client method of each: nothing else
# read back from the store is ever sent.
CLOSING_METHODS = {
    "chat.update": "chat_update",
    "reactions.remove": "reactions_remove",
    "reactions.add": "reactions_add",
    "agents.sessions.setStatus": "agents_sessions_setStatus",
    "assistant.threads.setStatus": "assistant_threads_setStatus",
}
# What Slack answers when the thread already shows what the call asks for.
ALREADY_SO = frozenset({"no_reaction", "already_reacted"})

Sent = Callable[[Sequence[str]], None]


def read_calls(calls_json: str) -> list[Json]:
    try:
        calls = json.loads(calls_json)
    except ValueError:
        log.error("unreadable closing Slack calls in the store; left out")
        return []
    return [call for call in calls if isinstance(call, dict)] if isinstance(calls, list) else []


class ClosingCalls:
    """Sends closing calls through the bot's client (so through the workspace's pacer,
    which holds each until its method's budget has room)."""

    def __init__(self, client: AsyncWebClient, background: Background) -> None:
        self._client = client
        self._background = background

    async def send(self, calls: Sequence[Json]) -> list[str]:
        """Each call in order; a refused one is logged and the others still go. Returns the
        messages the calls closed (a progress message's end edit)."""
        closed = []
        for call in calls:
            await self._send(call)
            if call.get("method") == "chat.update":
                closed.append(str(call["args"].get("ts")))
        return closed

    def later(self, calls: Sequence[Json], sent: Sent) -> None:
        """`send` once the budget allows, without the caller; then `sent`. Given up at
        shutdown (`Background.close`): what was stored is sent after the next start."""
        self._background.run(self._send_then(calls, sent))

    async def _send_then(self, calls: Sequence[Json], sent: Sent) -> None:
        sent(await self.send(calls))

    async def _send(self, call: Json) -> None:
        method = str(call.get("method"))
        name = CLOSING_METHODS.get(method)
        args = call.get("args")
        if name is None or not isinstance(args, dict):
            log.error("a closing Slack call of an unknown kind (%s) left out", method)
            return
        try:
            await getattr(self._client, name)(**args)
        except SLACK_FAILURES as error:
            code = error_code(error)
            if code not in ALREADY_SO:
                log.info("closing call %s failed: %s", method, code)
