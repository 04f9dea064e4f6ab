"""Every sentence a person reads in Slack lives here, so wording is reviewed in one place."""

from __future__ import annotations

NOT_ENABLED = (
    "kelpie is not enabled in this channel. Ask an admin to map it to a role in kelpie's config."
)
WORKING = "_Looking into it…_"
INTERRUPTED = "Interrupted by a newer message in this thread."
INTERNAL_ERROR = "Something went wrong on kelpie's side; the details are in its log."
EMPTY_ANSWER = "_(The model returned an empty answer.)_"
MAX_ITERATIONS_NOTE = "_I used all my tool rounds for this question; this is what I found._"


def error_answer(sentence: str) -> str:
    return f":warning: {sentence}"
