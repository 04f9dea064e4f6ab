"""Every sentence a person reads in Slack lives here, so wording is reviewed in one place."""

from __future__ import annotations

from bot.slack.safe_text import escape_mrkdwn
from bot.values import ALERT_ASKER_PREFIX, shown_person

NOT_ENABLED = (
    "kelpie is not enabled in this channel. Ask an admin to map it to a role in kelpie's config."
)
NOT_FOR_EXTERNAL_USERS = (
    "kelpie answers only people from this workspace here. Ask an admin to set "
    "slack.external_users_role if people from other organisations should use it."
)
WORKING = "_Looking into it…_"
INTERRUPTED = "Interrupted by a newer message in this thread."
INTERNAL_ERROR = "Something went wrong on kelpie's side; the details are in its log."
EMPTY_ANSWER = "_(The model returned an empty answer.)_"
MAX_ITERATIONS_NOTE = "_I used all my tool rounds for this question; this is what I found._"
ANSWER_CUT_NOTE = "_The answer was cut at the output limit; ask me to go on for the rest._"
# A turn whose process died mid-answer (crash, kill, node loss), closed by the replica or
# restart that took it over.
# A turn whose end kelpie could not store (its database failed): let go so that the thread
# can go on, with this note.
TURN_RELEASED_HEADER = "_Stopped: kelpie could not record the end of this answer._"
TURN_RELEASED = (
    "kelpie could not record the end of this answer in its database, so it let this "
    "thread go. If anything above is missing, ask again."
)
TURN_LOST_HEADER = "_Stopped: kelpie restarted before this answer was finished._"
TURN_LOST = (
    "kelpie restarted while answering this, so the answer above is unfinished. "
    "Ask again and it will start over."
)


def queued(running: int, ahead: int) -> str:
    waiting = f" and {ahead} more are waiting" if ahead else ""
    return (
        f"_Queued: kelpie is answering {running} other requests{waiting}; "
        "yours starts as soon as one finishes._"
    )


def person_busy(cap: int) -> str:
    questions = "question" if cap == 1 else "questions"
    return (
        f"You already have {cap} {questions} in progress, the most kelpie takes from one "
        "person at once; ask again when one of them has answered (or stop one)."
    )


def channel_busy(cap: int) -> str:
    questions = "question" if cap == 1 else "questions"
    return (
        f"kelpie is already answering {cap} {questions} in this channel, the most it takes "
        "from one channel at once; ask again when one of them has answered."
    )


def error_answer(sentence: str) -> str:
    # The sentence may carry a provider's or the cluster's words: escaped like any other.
    return f":warning: {escape_mrkdwn(sentence)}"


# Live progress (bot/slack/progress/) and the Stop button (bot/slack/stop.py).
WRITING = "_Writing the answer…_"
PLAN_WORKING = "Looking into it"
PLAN_DONE = "Done"
PLAN_FAILED = "Stopped by an error"
PLAN_INTERRUPTED = "Interrupted"
DONE = "Done."
DONE_MAX_ITERATIONS = "Done (tool round budget used up)."
FAILED = "Stopped by an error."
STOP_BUTTON = "Stop"
STOP_HINT = "_Working on it. Press Stop to cancel this turn._"
ASSISTANT_STATUS = "is looking into it…"
CONTINUED_BELOW = "_(continued below)_"
TOOL_NOT_FINISHED = "not finished: the turn ended first"
TURN_ALREADY_FINISHED = "That turn has already finished; there is nothing to stop."
# Told once to someone past the click limit; their further clicks get no answer.
CLICKING_TOO_FAST = (
    "You are clicking faster than kelpie answers clicks, so your clicks are ignored for a "
    "minute. Wait a moment, then press the button once."
)
# A Stop pressed just before kelpie restarted, handled after: it interrupts no answer (the
# cards it withdrew say so themselves).
STOP_AFTER_RESTART = (
    "kelpie restarted before your Stop was handled, so it stopped no answer. If one is still "
    "running in this thread, press Stop again."
)


def message_came_late(user: str) -> str:
    """A message kelpie acknowledged before it restarted, handled only after newer ones in
    its thread: answering it now would answer out of order, or undo what came after."""
    return (
        f"<@{user}>, your message from before kelpie restarted reached it only after newer "
        "ones in this thread, so it was not answered: send it again if it still applies."
    )


def stop_came_late(user: str) -> str:
    """A Stop pressed before kelpie restarted, handled only after newer activity in its
    thread: it stops and withdraws nothing newer than itself."""
    return (
        f"<@{user}>'s Stop from before kelpie restarted was handled late, so it stopped nothing "
        "and withdrew only what was waiting when it was pressed: press Stop again if needed."
    )


def stopped_by(user: str) -> str:
    return f"Stopped by <@{user}>."


def who_may_stop(asker: str, approvers: list[str]) -> str:
    """Why a Stop click was refused, naming who may stop instead."""
    if asker.startswith(ALERT_ASKER_PREFIX):
        return _who_may_stop_an_alert(shown_person(asker), approvers)
    if not approvers:
        return f"Only <@{asker}>, who asked, can stop this turn."
    return (
        f"Only <@{asker}>, who asked, or an approver of this channel "
        f"({', '.join(approvers)}) can stop this turn."
    )


def _who_may_stop_an_alert(alert: str, approvers: list[str]) -> str:
    """An alert's investigation has no person who asked: only approvers may stop it."""
    if not approvers:
        return (
            f"This turn investigates {alert}, and this channel has no approvers, "
            "so it cannot be stopped from here: it ends on its own."
        )
    return (
        f"This turn investigates {alert}: only an approver of this channel "
        f"({', '.join(approvers)}) can stop it."
    )


# The answer of a turn that ended at its approval card.
AWAITING_APPROVAL = (
    "Waiting for approval: nothing changes unless someone allowed to approve clicks Approve "
    "on the card above. I will report the outcome here."
)

# Approval clicks (bot/slack/cards.py).
APPROVAL_UNKNOWN = "This approval does not exist (any more)."


def approval_already(status: str) -> str:
    return f"This approval is already {status}; nothing changed."


def attachment_title(tool: str) -> str:
    return f"Output of {tool}"


ANSWER_FILE_NAME = "answer.md"
ANSWER_FILE_TITLE = "The full answer"


def in_file(title: str, chars: int) -> str:
    """Said in the thread of a text uploaded because it is too long for messages."""
    return f"_{title} ({chars:,} characters) is too long for messages; it is in the file._"


def card_details_above(chars: int) -> str:
    """On an approval card whose preview and reason are too long for one message."""
    return (
        f"_The preview and reason are too long for this card ({chars:,} characters): "
        "the whole text is in the thread just above. The card shows their opening._"
    )


def card_details_title(approval_id: str) -> str:
    return f"The full preview of approval {approval_id}"


# `/kelpie` (bot/slack/commands.py).
PAYLOAD_TITLE = "*Last request sent to the model* (secrets masked; only you can see this):"
PAYLOAD_APPROVERS_ONLY = (
    "Only people allowed to approve changes in this channel can see what kelpie sent to the model."
)


def unknown_subcommand(escaped_word: str) -> str:
    return (
        f"Unknown subcommand `{escaped_word}`. Try `/kelpie help`, `/kelpie role`, `/kelpie model`."
    )


# Feedback on answers (bot/slack/feedback.py): Slack's feedback buttons and what follows.
FEEDBACK_POSITIVE_LABEL = "Good answer"
FEEDBACK_NEGATIVE_LABEL = "Bad answer"
FEEDBACK_THANKS = "Thanks: your 👍 on this answer is recorded."
FEEDBACK_ALREADY = "Your feedback on this answer is already recorded; it counts once."
FEEDBACK_ASK_WHY = (
    "Thanks: your 👎 is recorded. What was wrong with this answer? Your words help turn this "
    "thread into a test kelpie must pass."
)
FEEDBACK_TELL_BUTTON = "Say what was wrong"
FEEDBACK_MODAL_TITLE = "What was wrong?"
FEEDBACK_MODAL_SUBMIT = "Send"
FEEDBACK_MODAL_LABEL = "What was wrong with the answer, or what should it have said?"
FEEDBACK_MODAL_HINT = "Stored with the thread (secrets masked) for the team's eval suite."
FEEDBACK_NOT_STORED = "Your feedback could not be stored; please try again in a minute."
FEEDBACK_REASON_MISSING = "There is no 👎 of yours on this answer to add this to."
FEEDBACK_REASON_EMPTY = "Say in a few words what was wrong."
FEEDBACK_REASON_THANKS = "Thanks: what you wrote is stored with this thread (secrets masked)."


# --- Incident records (`/kelpie record`, the Record button) ---
RECORD_BUTTON = "Record"
RECORD_TITLE = "Incident record"
RECORD_NO_THREAD = (
    "I found no thread with kelpie to record here. Give a thread's link "
    "(`/kelpie record https://…/archives/C…/p…`) or ask in a thread first."
)
RECORD_BAD_LINK = (
    "That is not a Slack thread link. Use *Copy link* on the thread's first message and "
    "give it as `/kelpie record LINK`."
)
RECORD_OTHER_CHANNEL = "That thread is in another channel: run `/kelpie record` there."
RECORD_FAILED = "Slack refused the record's file; try again in a minute."


def record_posted(user: str) -> str:
    return f"Incident record of this thread, made for <@{user}>."


def record_done(channel: str, thread_ts: str) -> str:
    return f"Posted the incident record as a file in the thread ({channel}, {thread_ts})."


# --- incident memory (bot/slack/memory.py) -------------------------------------------------
MARK_RESOLVED_BUTTON = "Mark resolved"
# The text of the message that carries an answer's buttons when its last part is full.
ANSWER_ACTIONS = "About the answer above:"
REMEMBER_BUTTON = "Remember"
DISCARD_BUTTON = "Discard"
MEMORY_CARD_TITLE = "*Remember this incident?* kelpie proposes this memory of the thread:"
MEMORY_CARD_NOTE = (
    "Nothing is stored until someone in this channel presses Remember; a remembered "
    "incident is offered to later threads about the same workload or alert."
)
MEMORY_REMEMBERED = "Remembered by <@{user}>: later threads about it will be offered it."
MEMORY_DISCARDED = "Discarded by <@{user}>: nothing was stored."
MEMORY_NOT_MEMBER = "Only people in this channel can do that; ask someone here to decide."
MEMORY_ALREADY = "Someone already decided about this memory."
MEMORY_UNKNOWN = "This memory proposal does not exist (any more)."
