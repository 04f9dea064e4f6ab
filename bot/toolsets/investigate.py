"""`spawn_investigation`: start a background sub-agent on a focused question.

The tool only asks the running turn to start it (through `ToolContext.background`); the
engine runs the sub-agent with read and diagnose tools only and drains its result into the
conversation later. Its own calls go through the same pipeline as any other.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from bot.toolsets.declare import ListNamespace, ToolArgs, declare, limited_text, resolve_namespace
from bot.toolsets.spec import Tool, ToolContext, ToolFailure, ToolKind, ToolResult

SPAWN_TOOL = "spawn_investigation"


class Investigation(ToolArgs):
    label: Annotated[str, limited_text(60, required=True), Field(description="e.g. 'db errors'")]
    question: Annotated[
        str, limited_text(2000, required=True), Field(description="What to find out.")
    ]
    namespace: ListNamespace = None


async def _spawn(args: Investigation, context: ToolContext) -> ToolResult:
    label, question = args.label, args.question
    namespace = resolve_namespace(args.namespace, context, allow_all=True)
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
    return declare(
        SPAWN_TOOL,
        ToolKind.DIAGNOSE,
        "Start a helper with read tools on one side question; its result arrives later.",
        Investigation,
        _spawn,
    )
