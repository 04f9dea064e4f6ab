"""The events toolset: what the cluster reported, most recent first (read)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from bot.toolsets.declare import (
    KIND,
    OPTIONAL_NAME,
    ListNamespace,
    ToolArgs,
    declare,
    resolve_namespace,
)
from bot.toolsets.kube.client import KubeClients
from bot.toolsets.kube.render import (
    KubeReads,
    capped,
    event_row,
    items_of,
    result,
    sorted_events,
    table,
    where,
)
from bot.toolsets.spec import Tool, ToolContext, ToolKind, ToolResult
from bot.values import plural


class EventList(ToolArgs):
    namespace: ListNamespace = None
    kind: Annotated[
        str | None,
        KIND,
        Field(description="Of the object, e.g. Pod."),
    ] = None
    name: Annotated[
        str | None,
        OPTIONAL_NAME,
        Field(description="Of the object."),
    ] = None
    warnings_only: bool = False


class _Events(KubeReads):
    async def list_events(self, args: EventList, context: ToolContext) -> ToolResult:
        namespace = resolve_namespace(args.namespace, context, allow_all=True)
        kind, name, warnings_only = args.kind, args.name, args.warnings_only
        fields = []
        if kind:
            fields.append(f"involvedObject.kind={kind}")
        if name:
            fields.append(f"involvedObject.name={name}")
        if warnings_only:
            fields.append("type=Warning")
        selector = ",".join(fields) or None
        kube = self.kube(context)
        describe = f"list events {where(namespace)}"
        if namespace is None:
            listing = await kube.call_json(
                describe, kube.core.list_event_for_all_namespaces, field_selector=selector
            )
        else:
            listing = await kube.call_json(
                describe, kube.core.list_namespaced_event, namespace, field_selector=selector
            )
        events = sorted_events(items_of(listing))
        warnings = sum(1 for e in events if e.get("type") == "Warning")
        about = f" about {kind or 'object'} {name}" if name else (f" about {kind}s" if kind else "")
        summary = f"{plural(len(events), 'event')}{about} {where(namespace)}, {warnings} warnings"
        if not events:
            return result([f"No events{about} {where(namespace)} match."], summary)
        rows = [event_row(e, with_object=True, with_namespace=namespace is None) for e in events]
        rows, more = capped(rows, "events")
        header = ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
        return result([summary, *table(header, rows), *([more] if more else [])], summary)


def event_tools(clients: KubeClients) -> list[Tool]:
    reads = _Events(clients)
    return [
        declare(
            "list_events",
            ToolKind.READ,
            "Events, newest first, optionally about one object or warnings only.",
            EventList,
            reads.audited(reads.list_events),
            kinds=("Event",),
        )
    ]
