"""Shows a turn in its Slack thread while it runs, and ends it cleanly.

Two renderings of one timeline (a line or task card per tool call, then the answer):

* **native** streaming: one streamed message per turn (`chat.startStream` /
  `chat.appendStream` / `chat.stopStream`) with a `task_update` chunk per tool call and the
  answer as `markdown_text`, sent in bursts: at most one append per second per thread,
  whatever the number of tokens. The final `stopStream` carries the footer. A stream that
  Slack ended on its side (`message_not_in_streaming_state`) is finished with `chat.update`
  and the turn goes on in a new stream, so no text is lost; `stopped_by_user` (Slack's own
  stop control) stops the turn as if the asker had pressed Stop. The Stop button sits on a
  small message right below the stream, deleted when the turn ends: `chat.stopStream` can
  add blocks to a streamed message but not take a button away.
* **update**: one progress message (with the Stop button) edited with `chat.update` at
  most once per second per thread, the answer posted as its own message(s) in mrkdwn.

`auto` tries native and falls back to update for a workspace whose API refuses the
streaming methods, and remembers that for later turns in the workspace.

Also owns: the status indicator (`eyes` → `white_check_mark`/`x` reactions, or the
assistant thread status in DMs: an event does not reliably say whether a DM is a Slack
assistant thread, so every DM tries it and a workspace that refuses it gets reactions
from then on), the registry of running turns the Stop button acts on
(the listener and who may stop live in `stop.py`), uploading the attachment of a `show_*`
tool as a file, and the footer. Slack API calls per turn grow with rounds and tool calls,
never with tokens.
"""

from bot.slack.progress.common import STOP_ACTION_ID, ActiveTurn, ActiveTurns, answer_messages
from bot.slack.progress.reporters import SlackReporters

__all__ = ["STOP_ACTION_ID", "ActiveTurn", "ActiveTurns", "SlackReporters", "answer_messages"]
