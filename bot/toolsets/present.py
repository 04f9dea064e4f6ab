"""Present tools (kind `present`): put something in front of the person, as a file.

`show_logs` reads a pod's logs with the read tools' own log code (the `pod_logs` handler:
same validation, same client, same errors) and returns them as the result's attachment;
the model gets a short confirmation. Unless `continue_analysis` is true, a round whose only
call is a successful presentation ends the turn at once (a yield signal), without another
model round. The Slack reporter uploads attachments of `show_*` tools as files.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import Field

from bot.toolsets.declare import NAME, OPTIONAL_NAME, ObjectNamespace, ToolArgs, declare
from bot.toolsets.spec import Tool, ToolContext, ToolKind, ToolResult

SHOW_LOGS = "show_logs"
DEFAULT_SHOW_LINES = 500


class ShowLogs(ToolArgs):
    namespace: ObjectNamespace = None
    pod: Annotated[str, NAME]
    container: Annotated[
        str | None,
        OPTIONAL_NAME,
        Field(description="Required when the pod has several."),
    ] = None
    tail_lines: Annotated[int, Field(ge=1, le=5000)] = DEFAULT_SHOW_LINES
    previous: Annotated[bool, Field(description="The crashed instance's logs.")] = False
    continue_analysis: bool = False


def present_tools(read_tools: Sequence[Tool]) -> list[Tool]:
    """The present tools, built on the read tools they show (by name: `pod_logs`)."""
    pod_logs = next((tool for tool in read_tools if tool.name == "pod_logs"), None)
    if pod_logs is None:
        return []
    read_logs = pod_logs.handler

    async def show_logs(args: ShowLogs, context: ToolContext) -> ToolResult:
        analyse = args.continue_analysis
        read_args: dict[str, Any] = {
            "name": args.pod,
            "tail_lines": args.tail_lines,
            "previous": args.previous,
        }
        for key, value in (("namespace", args.namespace), ("container", args.container)):
            if value is not None:
                read_args[key] = value
        logs = await read_logs(read_args, context)
        attachment = logs.attachment if logs.attachment is not None else logs.text
        confirmation = f"Posted to the thread as a file: {logs.summary}."
        if analyse:
            # The model asked to keep going: it gets the lines too (cut to its budget later).
            text = f"{confirmation}\n{logs.text}"
        else:
            text = f"{confirmation} The person can read it there; the turn ends here."
        return ToolResult(
            text=text, summary=logs.summary, attachment=attachment, end_turn=not analyse
        )

    return [
        declare(
            SHOW_LOGS,
            ToolKind.PRESENT,
            "Post a pod's logs as a file; ends the turn unless continue_analysis.",
            ShowLogs,
            show_logs,
            kinds=pod_logs.resource_kinds,
        )
    ]
