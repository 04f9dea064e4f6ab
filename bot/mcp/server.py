"""kelpie's tools for other agents over MCP: a surface, like Slack.

A caller (an IDE, Slackbot's MCP client, another bot) authenticates with its bearer token
(`bot/mcp/server_access.py`) and sees exactly its role's tools, with their input schemas
from kelpie's declarations, plus `kelpie_approval_status`. Every call passes the same
pipeline as a model's call in Slack (role, hooks, firewall, guardian, approval, timeout,
masking, audit naming the client). A write never runs from MCP alone: the call returns
"pending approval <id>" with the dry-run preview, the card is posted in the client's
approval channel, and only a click by someone the client's role allows runs it, once,
through the approval service's one path.

What is not offered: the present tools (they post into a Slack thread; an MCP caller has
none), the background investigation (it belongs to a running turn), and the role's writes
when the client has no approval channel. No token, a wrong token, a tool outside the role:
an MCP error, nothing executed.

The transports (streamable HTTP on `server.mcp`, stdio for `kelpie mcp serve --stdio`) are
in `bot/mcp/server_http.py`; this module knows neither.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError

import bot.mcp.server_copy as copy
from bot.mcp.server_access import McpCaller
from bot.model.outbound import mask_value_async
from bot.pipeline.decision import CallScope
from bot.pipeline.harness import ToolHarness, ToolRegistry
from bot.pipeline.roles import offered_tools
from bot.toolsets.investigate import SPAWN_TOOL
from bot.toolsets.spec import Tool, ToolKind
from bot.values import Approval, SessionInfo, ToolCallRequest, ToolOutcome, ToolStatus

log = logging.getLogger(__name__)

# JSON-RPC's "invalid params": an unknown tool, a denied call (the spec's code for both).
REFUSED = types.INVALID_PARAMS
UNAUTHORIZED = -32001

_STATUS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"approval_id": {"type": "string", "description": copy.STATUS_ARGUMENT}},
    "required": ["approval_id"],
    "additionalProperties": False,
}


# Counts a call by client and outcome (`Metrics.count_mcp_call`).
Count = Callable[[str, str], None]


class SessionStore(Protocol):
    async def get_or_create(self, template: SessionInfo) -> SessionInfo: ...


class ApprovalLookup(Protocol):
    async def get(self, approval_id: str) -> Approval | None: ...

    async def pending_in(self, session_id: int) -> list[Approval]: ...


class McpToolbox:
    """What a caller may list and call; transport-free."""

    def __init__(
        self,
        registry: ToolRegistry,
        harness: ToolHarness,
        sessions: SessionStore,
        approvals: ApprovalLookup,
        durable: Callable[[], Awaitable[object]],
        count: Count = lambda client, outcome: None,
    ) -> None:
        self._count = count
        # Commits what the store queued (a read's audit rides with the next write): the
        # caller reads no result whose audit could still be lost.
        self._durable = durable
        self._registry = registry
        self._harness = harness
        self._sessions = sessions
        self._approvals = approvals

    def offered(self, caller: McpCaller) -> list[Tool]:
        """The caller's role's tools an MCP caller can use (see the module docstring)."""
        return [
            tool
            for tool in offered_tools(caller.binding.role, self._registry.all())
            if tool.kind is not ToolKind.PRESENT
            and tool.name != SPAWN_TOOL
            and (tool.kind is not ToolKind.WRITE or caller.approval_channel is not None)
        ]

    def list_tools(self, caller: McpCaller) -> list[types.Tool]:
        listed = [_described(tool) for tool in self.offered(caller)]
        status = types.Tool(
            name=copy.STATUS_TOOL,
            description=copy.STATUS_DESCRIPTION,
            input_schema=_STATUS_SCHEMA,
            annotations=types.ToolAnnotations(read_only_hint=True),
        )
        return [*listed, status]

    async def call(
        self, caller: McpCaller, name: str, arguments: dict[str, Any] | None
    ) -> types.CallToolResult:
        """Raises MCPError for an unknown or denied tool (nothing was run)."""
        if name == copy.STATUS_TOOL:
            return await self._status(caller, arguments or {})
        session = await self._sessions.get_or_create(caller.session())
        scope = _scope(caller, session, self.offered(caller))
        request = ToolCallRequest(f"mcp_{uuid.uuid4().hex[:16]}", name, json.dumps(arguments or {}))
        if self._registry.get(name) is None:
            await self._harness.refuse(request, scope, copy.unknown_tool(name))
            self._count(caller.name, "unknown")
            raise MCPError(REFUSED, copy.unknown_tool(name))
        outcome = await self._harness.dispatch(request, scope)
        await self._durable()
        self._count(caller.name, str(outcome.status))
        if outcome.status is ToolStatus.DENIED:
            reason = outcome.refusal.reason if outcome.refusal is not None else outcome.summary
            raise MCPError(REFUSED, copy.denied(reason))
        if outcome.status is ToolStatus.PENDING:
            return await self._pending(session, request.id, outcome)
        return _result(outcome)

    async def _pending(
        self, session: SessionInfo, call_id: str, outcome: ToolOutcome
    ) -> types.CallToolResult:
        found = [
            a for a in await self._approvals.pending_in(session.id) if a.tool_call_id == call_id
        ]
        if not found:  # decided (expired) already, or another process took it: say so plainly
            return _result(outcome)
        approval = found[0]
        preview = "\n".join(change.render() for change in approval.plan.changes) or "(no changes)"
        structured = {
            "status": "pending",
            "approval_id": approval.id,
            "description": approval.plan.description,
            "cluster": approval.plan.cluster,
            "preview": preview,
            "notes": list(approval.plan.notes),
        }
        return await _masked(copy.pending(approval, preview), structured)

    async def _status(self, caller: McpCaller, arguments: dict[str, Any]) -> types.CallToolResult:
        approval_id = arguments.get("approval_id")
        if not isinstance(approval_id, str) or not approval_id:
            raise MCPError(types.INVALID_PARAMS, copy.STATUS_ARGUMENT)
        approval = await self._approvals.get(approval_id)
        if approval is None or approval.requested_by != caller.asker:
            raise MCPError(types.INVALID_PARAMS, copy.unknown_approval(approval_id))
        structured = {
            "approval_id": approval.id,
            "status": str(approval.status),
            "decided_by": approval.decided_by,
            "outcome": approval.outcome,
        }
        return await _masked(copy.status_line(approval), structured)


async def _masked(text: str, structured: dict[str, Any]) -> types.CallToolResult:
    """A result kelpie wrote itself around cluster text (a preview quotes the target, an
    outcome the API server): masked like a tool's result before it leaves."""
    (text, structured), _ = await mask_value_async([text, structured])
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], structured_content=structured
    )


def _described(tool: Tool) -> types.Tool:
    write = tool.kind is ToolKind.WRITE
    return types.Tool(
        name=tool.name,
        description=tool.description,
        input_schema=tool.parameters,
        annotations=types.ToolAnnotations(read_only_hint=not write, destructive_hint=write),
    )


def _scope(caller: McpCaller, session: SessionInfo, offered: list[Tool]) -> CallScope:
    binding = caller.binding
    return CallScope(
        session_id=session.id,
        session_key=session.session_key,
        channel_id=caller.approval_channel or "",
        slack_user=caller.asker,
        role_name=binding.role_name,
        role=binding.role,
        tool_context=binding.tool_context(),
        offered=frozenset(tool.name for tool in offered),
        turn_id=f"mcp-{uuid.uuid4().hex}",
    )


def _result(outcome: ToolOutcome) -> types.CallToolResult:
    """The pipeline's (masked) outcome: its text, and the same as structured content."""
    structured = {
        "status": str(outcome.status),
        "summary": outcome.summary,
        "text": outcome.content,
    }
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=outcome.content)],
        structured_content=structured,
        is_error=outcome.status is not ToolStatus.OK,
    )


# Who is calling, from the request (HTTP: its Authorization header; stdio: the process's
# token). Raises MCPError when nobody is.
Identify = Callable[[ServerRequestContext[Any, Any]], McpCaller]


def mcp_server(toolbox: McpToolbox, identify: Identify) -> Server[Any]:
    """The SDK's low-level server over the toolbox."""

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=toolbox.list_tools(identify(ctx)))

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        caller = identify(ctx)
        return await _guarded(toolbox.call(caller, params.name, params.arguments))

    return Server("kelpie", on_list_tools=list_tools, on_call_tool=call_tool)


async def _guarded(work: Awaitable[types.CallToolResult]) -> types.CallToolResult:
    """An MCP error passes; anything else is logged and becomes one sentence (a traceback's
    text could quote a secret)."""
    try:
        return await work
    except MCPError:
        raise
    except Exception:
        log.exception("an MCP tool call failed")
        raise MCPError(types.INTERNAL_ERROR, copy.INTERNAL) from None
