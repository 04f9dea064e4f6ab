"""Shows a turn in its Slack thread while it runs, and ends it cleanly.

Two renderings of one timeline (a line or task card per tool call, then the answer):

* **native** streaming: one streamed message per turn (`chat.startStream` /
  `chat.appendStream` / `chat.stopStream`) with a `task_update` chunk per tool call and the
  answer as `markdown_text`, sent in bursts: at most one append per second per thread,
  whatever the number of tokens. The final `stopStream` carries the footer. A streamed
  message holds about 12,000 characters, so a longer answer goes on in a new stream message
  (cut at a paragraph break outside code; a cut code block is closed and reopened). A stream
  that Slack ended on its side (`message_not_in_streaming_state`) is finished with
  `chat.update` and the turn goes on in a new stream, so no text is lost.
* **update**: one progress message (with kelpie's Stop button) edited with `chat.update` at
  most once per second per thread, the answer posted as its own message(s) in mrkdwn, split
  within Slack's limits (`ThreadWriter`), or as a file when it is huge.

`auto` tries native and falls back to update for a workspace whose API refuses the
streaming methods, and remembers that for later turns in the workspace.

Each thread is a Slack agent session (`sessions.py`): `processing` while a turn runs, which
gives it Slack's own stop button; `agent_session_stopped` stops the turn like kelpie's Stop.

Also owns: the status indicator (`eyes` → `white_check_mark`/`x` reactions, or the
assistant thread status in DMs: an event does not reliably say whether a DM is a Slack
assistant thread, so every DM tries it and a workspace that refuses it gets reactions
from then on), the registry of running turns the stop buttons act on
(the listener and who may stop live in `stop.py`), uploading the attachment of a `show_*`
tool as a file, and the footer. Slack API calls per turn grow with rounds and tool calls,
never with tokens; every call goes through the workspace's pacer (`bot/slack/pacing.py`),
so under pressure a thread's progress waits and coalesces into fewer, larger writes. A
turn never waits for a spent Tier 2/3 budget where it has another way: with no room for a
stream's start it takes the update rendering (posting is paced per channel only); a
progress edit, the `eyes` reaction or the agent session with no room is left out; its
end's edit and status go out later, once the budget allows, without holding the turn;
they are kept with the turn's end in the store until Slack accepted them, so what a stop
or a crash left unsent is sent by the next start or another replica (`closing.py`).

Why not slack_sdk's `chat_stream()` helper (`AsyncChatStream`) or Bolt's `say_stream`: the
helper flushes by buffer size (256 characters), not by time, so it either appends per few
tokens or shows nothing for long stretches; it cannot go on in a new message when one is
full or has expired (its `ts` is read-only and a stopped helper refuses further use); and it
hides which error ended a stream, which decides between going on in a new message and
stopping the turn. `say_stream` is that helper bound to a listener, while kelpie's turns run
outside listeners. kelpie sends the same three methods with the same chunk types itself.
"""

from bot.slack.progress.common import STOP_ACTION_ID, ActiveTurn, ActiveTurns
from bot.slack.progress.render import answer_messages
from bot.slack.progress.reporters import SlackReporters

__all__ = ["STOP_ACTION_ID", "ActiveTurn", "ActiveTurns", "SlackReporters", "answer_messages"]
