"""`spawn_investigation`: start a background sub-agent on a focused question.

The tool only asks the running turn to start it (through `ToolContext.background`); the
engine runs the sub-agent with read and diagnose tools only and drains its result into the
conversation later. Its own calls go through the same pipeline as any other.
"""

from __future__ import annotations

from typing import Any

from bot.tools.spec import (
    Tool,
    ToolArgumentError,
    ToolContext,
    ToolFailure,
    ToolKind,
    ToolResult,
    ToolScope,
    namespace_arg,
    str_arg,
)

SPAWN_TOOL = "spawn_investigation"


async def _spawn(args: dict[str, Any], context: ToolContext) -> ToolResult:
    unknown = sorted(set(args) - {"label", "question", "namespace"})
    if unknown:
        raise ToolArgumentError(f"unknown argument(s) {', '.join(unknown)}.")
    label = str_arg(args, "label", max_len=60)
    question = str_arg(args, "question", max_len=2000)
    if not label or not question:
        raise ToolArgumentError("label and question are required.")
    namespace = namespace_arg(args, context, allow_all=True)
    if context.background is None:
        raise ToolFailure("background investigations are not available here.")
    investigation_id = context.background.spawn(label, question, namespace)
    return ToolResult(
        text=(
            f'Started background investigation "{label}" ({investigation_id}). Its result '
            "will arrive as a message in a later round; continue meanwhile."
        ),
        summary=f'started "{label}" ({investigation_id})',
    )


def investigation_tool() -> Tool:
    return Tool(
        name=SPAWN_TOOL,
        kind=ToolKind.DIAGNOSE,
        description=(
            "Start a background investigation of one focused question by a helper with read "
            "tools only (e.g. 'do the other deployments in shop show the same errors?'). "
            "Its result arrives later as a message; use it for side questions that need "
            "several reads while you continue."
        ),
        parameters={
            "type": "object",
            "properties": {
                "label": {"type": "string", "description": "A short name, e.g. 'db errors'."},
                "question": {"type": "string", "description": "What to find out."},
                "namespace": {
                    "type": "string",
                    "description": "Namespace to focus on. Defaults to the channel's.",
                },
            },
            "required": ["label", "question"],
            "additionalProperties": False,
        },
        handler=_spawn,
        scope=ToolScope.NAMESPACED,
    )
