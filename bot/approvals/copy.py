"""What a person reads about an approved change that its kelpie process left unfinished
(the thread, the card, the model's note). Kept here, in the approvals layer, because both
front ends (Slack and `kelpie chat`) show it; the rest of the wording is in
`bot/slack/copy.py`.

That process stopped (a crash, a kill, a lost node) between the click and the outcome; the
change is reconciled by whichever replica finds it first: the same deployment restarted,
or another one still running. So the sentences name neither: they say what is true in both
cases."""

from __future__ import annotations

from bot.values import Approval, Landed

# The outcome, as stored and shown on the card.
RECONCILED_EXECUTED = (
    "executed (confirmed by reading the target back after the kelpie process making it stopped)"
)
RECONCILED_NOT_EXECUTED = (
    "not executed: the kelpie process making it stopped before the change was made; ask again"
)
RECONCILED_UNKNOWN = (
    "unknown: the kelpie process making it stopped during the change and reading the target"
    " back cannot tell whether it was made; check it before asking again"
)


def reconciled_executed(approval: Approval) -> str:
    """The thread's note: the change was made before its process stopped."""
    return (
        f"Approval {approval.id[:8]} ({approval.plan.description}) was approved by "
        f"<@{approval.decided_by}>; the kelpie process making the change stopped during the "
        "write, and reading the target back shows the change was made."
    )


def reconciled_unknown(approval: Approval) -> str:
    """The thread's note: its process stopped mid-change and nothing read tells the outcome."""
    return (
        f"Approval {approval.id[:8]} ({approval.plan.description}) was approved by "
        f"<@{approval.decided_by}>, but the kelpie process making the change stopped during "
        "it, and reading the target back cannot tell whether it was made. Check the target "
        "before asking again: asking again may make the change twice."
    )


def reconciled_not_executed(approval: Approval) -> str:
    """The thread's note: its process stopped before the change was made."""
    return (
        f"Approval {approval.id[:8]} ({approval.plan.description}) was approved by "
        f"<@{approval.decided_by}>, but the kelpie process making the change stopped before "
        "it was made: it was NOT executed. A person has to ask again."
    )


RECONCILED = {
    Landed.APPLIED: RECONCILED_EXECUTED,
    Landed.NOT_APPLIED: RECONCILED_NOT_EXECUTED,
    Landed.UNKNOWN: RECONCILED_UNKNOWN,
}


def reconciled_note(approval: Approval, landed: Landed) -> str:
    """The thread's note on a change its process left unfinished, by what reading it shows."""
    if landed is Landed.APPLIED:
        return reconciled_executed(approval)
    if landed is Landed.NOT_APPLIED:
        return reconciled_not_executed(approval)
    return reconciled_unknown(approval)
