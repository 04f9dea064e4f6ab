"""What kelpie's MCP server tells its callers: every sentence an MCP client reads."""

from __future__ import annotations

from bot.values import Approval, ApprovalState

STATUS_TOOL = "kelpie_approval_status"
STATUS_DESCRIPTION = "Whether a change this client asked for is still pending, or its outcome."
STATUS_ARGUMENT = "The approval id returned by the write (pending approval <id>)."

NO_TOKEN = "Unauthorized: send the client's token as 'Authorization: Bearer <token>'."
WRONG_TOKEN = "Unauthorized: this token belongs to no configured MCP client."
STDIO_NO_TOKEN = "Unauthorized: set KELPIE_MCP_TOKEN to the client's token."
SHARED_TOKEN = (
    "mcp.clients: two clients' token_env variables hold the same token; give each its own"
)
INTERNAL = "kelpie failed on this call (logged); nothing was changed by it."


def unknown_tool(name: str) -> str:
    return f'Unknown tool "{name}": this client\'s role offers it no such tool.'


def denied(reason: str) -> str:
    return f"Denied: {reason}. Nothing was run."


def unknown_approval(approval_id: str) -> str:
    return f"No approval {approval_id} was asked for by this client."


def pending(approval: Approval, preview: str) -> str:
    plan = approval.plan
    return (
        f"pending approval {approval.id}: {plan.description} on cluster {plan.cluster}. "
        f"Nothing has changed: a person allowed by role {approval.role} decides on the card "
        f"in Slack, and the change runs once, after an approval. Ask {STATUS_TOOL} with "
        f"this approval_id for the outcome.\nPreview (server-side dry run):\n{preview}"
    )


def status_line(approval: Approval) -> str:
    if approval.status is ApprovalState.PENDING:
        return f"Approval {approval.id} is pending: nobody has decided it yet; nothing has changed."
    if approval.status is ApprovalState.APPROVED and approval.outcome is None:
        return f"Approval {approval.id} was approved; the change is running now."
    by = f" by {approval.decided_by}" if approval.decided_by else ""
    return f"Approval {approval.id} is {approval.status}{by}: {approval.outcome or 'not executed'}."
