"""Present tools (kind `present`): put something in front of the person, as a file.

`show_logs` reads a pod's logs with the read tools' own log code (the `pod_logs` handler:
same validation, same client, same errors) and returns them as the result's attachment;
the model gets a short confirmation. Unless `continue_analysis` is true, a round whose only
call is a successful presentation ends the turn at once (a yield signal), without another
model round. The Slack reporter uploads attachments of `show_*` tools as files.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bot.tools.spec import (
    Tool,
    ToolArgumentError,
    ToolContext,
    ToolKind,
    ToolResult,
    ToolScope,
    bool_arg,
    int_arg,
)

SHOW_LOGS = "show_logs"
DEFAULT_SHOW_LINES = 500
_ARGS = {"namespace", "pod", "container", "tail_lines", "previous", "continue_analysis"}


def present_tools(read_tools: Sequence[Tool]) -> list[Tool]:
    """The present tools, built on the read tools they show (by name: `pod_logs`)."""
    pod_logs = next((tool for tool in read_tools if tool.name == "pod_logs"), None)
    if pod_logs is None:
        return []
    read_logs = pod_logs.handler

    async def show_logs(args: dict[str, Any], context: ToolContext) -> ToolResult:
        if not isinstance(args, dict):
            raise ToolArgumentError("arguments must be a JSON object.")
        unknown = sorted(set(args) - _ARGS)
        if unknown:
            known = ", ".join(sorted(_ARGS))
            raise ToolArgumentError(f"unknown argument(s) {', '.join(unknown)}; known: {known}.")
        analyse = bool_arg(args, "continue_analysis", default=False)
        tail = int_arg(args, "tail_lines", default=DEFAULT_SHOW_LINES, minimum=1, maximum=5000)
        read_args: dict[str, Any] = {"name": args.get("pod"), "tail_lines": tail}
        for key in ("namespace", "container", "previous"):
            if key in args:
                read_args[key] = args[key]
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
        Tool(
            name=SHOW_LOGS,
            kind=ToolKind.PRESENT,
            description=(
                "Show a pod's logs to the person as a file in the thread. Use it when the "
                "person asks to see logs. The turn ends after it unless continue_analysis is "
                "true (then you also get the lines to analyse)."
            ),
            parameters={
                "type": "object",
                "properties": {
                    "namespace": {
                        "type": "string",
                        "description": "Namespace of the pod. Defaults to the channel's.",
                    },
                    "pod": {"type": "string", "description": "Pod name."},
                    "container": {
                        "type": "string",
                        "description": "Container name; required when the pod has several.",
                    },
                    "tail_lines": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": 5000,
                        "default": DEFAULT_SHOW_LINES,
                        "description": "How many of the last lines to show.",
                    },
                    "previous": {
                        "type": "boolean",
                        "default": False,
                        "description": "Logs of the previous, crashed instance.",
                    },
                    "continue_analysis": {
                        "type": "boolean",
                        "default": False,
                        "description": "Keep working after showing the logs.",
                    },
                },
                "required": ["pod"],
                "additionalProperties": False,
            },
            handler=show_logs,
            scope=ToolScope.NAMESPACED,
            resource_kinds=pod_logs.resource_kinds,
        )
    ]
