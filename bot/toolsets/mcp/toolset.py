"""What MCP servers list, as kelpie tools: named for the model (`mcp_<server>_<tool>`) and for
roles (`mcp/<server>/<tool>`), a read or a write by the server's `read` patterns alone.

A read runs through the pipeline's execute stage; a write is prepared into a plan whose
preview is the exact arguments, and runs only after a person approved its card. The
server's own hints (`readOnlyHint`, …) are shown in the description and on the card, never
used to decide. A namespace-like argument is where the call lands, so the role gate and the
firewall judge it; a tool without one takes no such argument.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from functools import cached_property, partial
from typing import Any

from mcp.types import CallToolResult, TextContent

from bot.config import MCP_PATTERN_KIND, McpServerConfig
from bot.toolsets.declare import StatedReason, schema_of
from bot.toolsets.mcp.connection import ListedTool, McpConnection, ServerState
from bot.toolsets.spec import (
    REASON_ARG,
    Tool,
    ToolArgumentError,
    ToolContext,
    ToolFailure,
    ToolKind,
    ToolResult,
    ToolScope,
)
from bot.values import FieldChange, PreviewSource, WritePlan, WriteTarget

# The model's tool-name rules (OpenAI's, the strictest of the providers kelpie speaks to).
MODEL_NAME_CHARS = 64
_NOT_IN_NAME = re.compile(r"[^A-Za-z0-9_-]")
# Argument names that say where a call lands (compared without case, `_` or `-`).
_NAMESPACE_KEYS = frozenset({"namespace", "ns", "namespacename", "k8snamespace", "targetnamespace"})
# What of a result is kept before masking (the model's share is cut again per turn).
RESULT_CHARS = 200_000
_DESCRIPTION_CHARS = 300
WRITE_TARGET_KIND = "MCP tool"


def model_name(server: str, tool: str) -> str:
    """`mcp_<server>_<tool>`, or (a tool name the model's rules refuse, or too long) its
    sanitised start and a digest of the tool's name: the same every time, so an approval
    made before a restart finds its tool again. Server names hold no `_`, so no two
    servers' tools meet."""
    plain = f"mcp_{server}_{tool}"
    if len(plain) <= MODEL_NAME_CHARS and not _NOT_IN_NAME.search(plain):
        return plain
    digest = hashlib.sha256(tool.encode()).hexdigest()[:8]
    return f"{_NOT_IN_NAME.sub('_', plain)[: MODEL_NAME_CHARS - 9]}_{digest}"


def role_name(server: str, tool: str) -> str:
    return f"{MCP_PATTERN_KIND}/{server}/{tool}"


def is_read(config: McpServerConfig, tool: str) -> bool:
    return any(fnmatchcase(tool, pattern) for pattern in config.read)


def namespace_key(schema: dict[str, Any]) -> str | None:
    """The argument of a tool's schema that names a namespace, if it has one."""
    properties = schema.get("properties")
    for key in properties if isinstance(properties, dict) else ():
        if _folded(key) in _NAMESPACE_KEYS:
            return str(key)
    return None


def _folded(key: str) -> str:
    return key.lower().replace("_", "").replace("-", "")


@dataclass(frozen=True)
class McpTool:
    """One listed tool of one server, and how kelpie calls it (what its schema says is read
    once, when the list is: a call only looks it up)."""

    server: str
    listed: ListedTool
    connection: McpConnection
    kind: ToolKind

    @cached_property
    def name(self) -> str:
        return model_name(self.server, self.listed.name)

    @cached_property
    def namespace_arg(self) -> str | None:
        return namespace_key(self.listed.input_schema)

    @cached_property
    def declared(self) -> frozenset[str]:
        properties = self.listed.input_schema.get("properties")
        return frozenset(properties) if isinstance(properties, dict) else frozenset()

    def namespace(self, args: dict[str, Any], context: ToolContext) -> str | None:
        """Where a call lands: its namespace argument, or (absent) the channel's default,
        which `sent` then passes on. Any other value ("*", "", null, a list…) may mean
        every namespace to the server: judged as all namespaces (None)."""
        key = self.namespace_arg
        if key is None or key not in args:
            return context.default_namespace
        value = args[key]
        return value if isinstance(value, str) and value and value != "*" else None

    def sent(self, args: dict[str, Any], context: ToolContext) -> dict[str, Any]:
        """The arguments as the server gets them: checked, and with the channel's default
        namespace where the model named none (the namespace the pipeline judged, not the
        server's own default)."""
        checked = self.check(args)
        key = self.namespace_arg
        if key is not None and key not in checked and context.default_namespace:
            return {**checked, key: context.default_namespace}
        return checked

    def check(self, args: dict[str, Any]) -> dict[str, Any]:
        """The arguments, once no argument is one the tool does not declare (so no
        namespace reaches a tool the pipeline did not judge as namespaced)."""
        declared = self.declared
        unknown = sorted(set(args) - declared)
        if self.listed.input_schema.get("additionalProperties"):
            # A free-form tool takes any argument, but never an undeclared namespace.
            unknown = [key for key in unknown if _folded(key) in _NAMESPACE_KEYS]
        if unknown:
            known = ", ".join(sorted(declared)) or "none"
            raise ToolArgumentError(f"unknown argument(s) {', '.join(unknown)}; known: {known}.")
        return args

    async def run(self, args: dict[str, Any], context: ToolContext) -> ToolResult:
        sent = self.sent(args, context)
        return self.result_of(await self.connection.call(self.listed.name, sent), sent)

    def result_of(self, result: CallToolResult, args: dict[str, Any]) -> ToolResult:
        text = rendered(result)
        where = f"{self.server}/{self.listed.name}"
        if result.is_error:
            raise ToolFailure(f"MCP tool {where} answered an error: {_first_line(text, 300)}")
        return ToolResult(
            text=text,
            summary=f"{where}: {_first_line(text, 80)}",
            evidence=f"MCP {where} {json.dumps(args, sort_keys=True)}",
        )

    def tool(self) -> Tool:
        schema = _model_schema(self.listed.input_schema)
        write = self.kind is ToolKind.WRITE
        return Tool(
            name=self.name,
            kind=self.kind,
            description=self.description(),
            parameters=_with_reason(schema) if write else schema,
            handler=_approval_only if write else self.run,
            scope=ToolScope.NAMESPACED if self.namespace_arg is not None else ToolScope.QUERY,
            write=McpWrite(self) if write else None,
            target=self.namespace,
            pattern=role_name(self.server, self.listed.name),
        )

    def description(self) -> str:
        said = _first_line(self.listed.description, _DESCRIPTION_CHARS) or self.listed.name
        claims = f"; the server says: {', '.join(self.listed.hints)}" if self.listed.hints else ""
        return f"{said} (MCP server {self.server}, {self.kind}{claims})"


class McpWrite:
    """A configured write: the plan is the exact call; it runs only once approved."""

    def __init__(self, tool: McpTool) -> None:
        self._tool = tool

    async def prepare(self, args: dict[str, Any], context: ToolContext) -> WritePlan:
        tool = self._tool
        checked = tool.sent(args, context)
        if tool.connection.state is not ServerState.UP:
            raise ToolFailure(tool.connection.problem or f"MCP server {tool.server} is down")
        # The namespace the call lands in, where the tool has a namespace argument.
        namespace = tool.namespace(checked, context) if tool.namespace_arg is not None else None
        return WritePlan(
            tool=tool.name,
            description=f"Call {tool.listed.name} on MCP server {tool.server}",
            cluster=context.cluster,
            target=WriteTarget(
                WRITE_TARGET_KIND, namespace or "", f"{tool.server}/{tool.listed.name}", "", ""
            ),
            changes=(FieldChange("arguments", "(none)", json.dumps(checked, sort_keys=True)),),
            args=checked,
            notes=_notes(tool.listed),
            preview=PreviewSource.EXACT_CALL,
        )

    async def execute(self, plan: WritePlan, context: ToolContext) -> ToolResult:
        result = await self._tool.connection.call(self._tool.listed.name, plan.args)
        return self._tool.result_of(result, plan.args)


async def _approval_only(args: dict[str, Any], context: ToolContext) -> ToolResult:
    raise ToolFailure("write tools run only through an approval")


def _notes(listed: ListedTool) -> tuple[str, ...]:
    if "read-only" not in listed.hints:
        return ()
    return (
        "The MCP server calls this tool read-only (readOnlyHint); kelpie's configuration "
        "makes it a write, so it runs only once approved.",
    )


class McpToolset:
    """Every configured server's current tools (a `ToolSource` of the registry)."""

    def __init__(self, connections: Sequence[McpConnection], configs: dict[str, McpServerConfig]):
        self.connections = list(connections)
        self._configs = configs
        self._built: dict[str, tuple[tuple[ListedTool, ...], list[Tool]]] = {}

    def tools(self) -> list[Tool]:
        found: list[Tool] = []
        for connection in self.connections:
            found += self._tools_of(connection)
        return found

    def _tools_of(self, connection: McpConnection) -> list[Tool]:
        listed = connection.tools  # a new tuple only when the server's list changed
        kept = self._built.get(connection.name)
        if kept is not None and kept[0] is listed:
            return kept[1]
        config = self._configs[connection.name]
        built: dict[str, Tool] = {}
        for item in listed:
            kind = ToolKind.READ if is_read(config, item.name) else ToolKind.WRITE
            tool = McpTool(connection.name, item, connection, kind).tool()
            built.setdefault(tool.name, tool)  # a digest clash: the first one listed
        self._built[connection.name] = (listed, list(built.values()))
        return list(built.values())

    async def start(self) -> None:
        """Every server's first attempt at once: the start waits for the slowest, at most
        its `timeout_s`."""
        await asyncio.gather(*(connection.start() for connection in self.connections))

    async def close(self) -> None:
        for connection in self.connections:
            await connection.close()


def mcp_toolset(
    configs: dict[str, McpServerConfig], values: Callable[[str], dict[str, str]]
) -> McpToolset:
    """A connection per configured server (none started: `start` does)."""
    connections = [
        McpConnection(name, config, partial(values, name)) for name, config in configs.items()
    ]
    return McpToolset(connections, dict(configs))


def rendered(result: CallToolResult) -> str:
    """What the model reads: the text parts, then the structured content as JSON when it
    says more than the text (other content kinds named, not inlined)."""
    parts: list[str] = []
    for item in result.content:
        if isinstance(item, TextContent):
            parts.append(item.text)
        else:
            parts.append(f"[{getattr(item, 'type', 'content')} content not shown]")
    structured = result.structured_content
    if structured is not None and not any(_says(part, structured) for part in parts):
        parts.append(json.dumps(structured, sort_keys=True, default=str))
    return "\n".join(parts)[:RESULT_CHARS]


def _says(text: str, structured: Any) -> bool:
    """Whether a text part already carries the structured content: the same JSON, or the
    plain value a server wrapped as {"result": value}."""
    if isinstance(structured, dict) and list(structured) == ["result"]:
        if str(structured["result"]) == text:
            return True
    try:
        return bool(json.loads(text) == structured)
    except ValueError:
        return False


def _model_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The server's input schema as offered to the model (its title dropped)."""
    offered = {key: value for key, value in schema.items() if key != "title"}
    offered.setdefault("type", "object")
    offered.setdefault("properties", {})
    return offered


def _with_reason(schema: dict[str, Any]) -> dict[str, Any]:
    reason = schema_of(StatedReason)
    if REASON_ARG in schema.get("properties", {}):
        return schema  # the tool's own argument: the card shows the arguments anyway
    return {
        **schema,
        "properties": {**schema.get("properties", {}), **reason["properties"]},
        "required": [*schema.get("required", []), *reason["required"]],
    }


def _first_line(text: str, limit: int) -> str:
    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return line if len(line) <= limit else line[: limit - 1] + "…"
