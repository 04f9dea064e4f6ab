"""What the Kubernetes read toolsets share: wire objects turned into compact text for a
model (a summary line first, then aligned rows capped at MAX_ROWS; never a raw API dump),
and `KubeReads`, the base of every read toolset's handlers (the context's cluster, the
identity the cluster saw, an object's recent events).

Deliberately absent: Secrets. No tool reads a Secret, and environment variables that
come from a secretKeyRef are never resolved (container env is not shown at all).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, TypeVar

from bot.toolsets.kube.client import KubeClient, KubeClients
from bot.toolsets.spec import ToolContext, ToolFailure, ToolResult

Obj = dict[str, Any]
Args = TypeVar("Args")
Handler = Callable[[Args, ToolContext], Awaitable[ToolResult]]

MAX_ROWS = 200
EVENTS_IN_DESCRIBE = 10
EVENT_HEAD = ["LAST SEEN", "TYPE", "REASON", "MESSAGE"]


def dig(obj: Any, *path: str) -> Any:
    """obj[path[0]][path[1]]…, or None where anything along the way is missing."""
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def parse_time(stamp: Any) -> datetime | None:
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        parsed = datetime.fromisoformat(stamp)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def age(stamp: Any, now: datetime | None = None) -> str:
    """kubectl-style age: 45s, 12m, 5h, 3d ("?" when unknown)."""
    then = parse_time(stamp)
    if then is None:
        return "?"
    seconds = max(0, int(((now or datetime.now(UTC)) - then).total_seconds()))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 120 * 60:
        return f"{seconds // 60}m"
    if seconds < 48 * 3600:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


def table(header: Sequence[str] | None, rows: Sequence[Sequence[str]]) -> list[str]:
    """Left-aligned columns (two spaces apart), with a header line unless it is None."""
    every = [header, *rows] if header is not None else list(rows)
    if not every:
        return []
    widths = [max(len(str(r[i])) for r in every) for i in range(len(every[0]))]
    return [
        "  ".join(str(cell).ljust(widths[i]) for i, cell in enumerate(row)).rstrip()
        for row in every
    ]


def capped(rows: list[list[str]], noun: str) -> tuple[list[list[str]], str | None]:
    if len(rows) <= MAX_ROWS:
        return rows, None
    more = len(rows) - MAX_ROWS
    return rows[:MAX_ROWS], f"… and {more} more {noun} (narrow with a selector or namespace)."


def where(namespace: str | None) -> str:
    return f"in namespace {namespace}" if namespace else "in all namespaces"


def labels_text(labels: Any) -> str:
    if not isinstance(labels, dict) or not labels:
        return "-"
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def items_of(listing: Any) -> list[Obj]:
    items = dig(listing, "items")
    return [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []


def ns_name(obj: Obj) -> str:
    namespace = dig(obj, "metadata", "namespace")
    name = dig(obj, "metadata", "name") or "?"
    return f"{namespace}/{name}" if namespace else str(name)


def result(lines: list[str], summary: str, attachment: str | None = None) -> ToolResult:
    return ToolResult(text="\n".join(lines), summary=summary, attachment=attachment)


# --- pods ---------------------------------------------------------------------------------


def container_statuses(pod: Obj) -> list[Obj]:
    statuses = dig(pod, "status", "containerStatuses")
    return [s for s in statuses if isinstance(s, dict)] if isinstance(statuses, list) else []


def pod_phase(pod: Obj) -> str:
    """The phase, with the reason a person would look at first (kubectl's STATUS)."""
    if dig(pod, "metadata", "deletionTimestamp"):
        return "Terminating"
    phase = dig(pod, "status", "phase") or "Unknown"
    reason = dig(pod, "status", "reason")  # e.g. Evicted
    if not reason:
        for status in container_statuses(pod):
            reason = dig(status, "state", "waiting", "reason") or dig(
                status, "state", "terminated", "reason"
            )
            if reason and reason != "Completed":
                break
            reason = None
    if not reason:
        for condition in dig(pod, "status", "conditions") or []:
            if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
                reason = condition.get("reason")
    return f"{phase} ({reason})" if reason else str(phase)


def pod_ready(pod: Obj) -> tuple[int, int]:
    total = len(dig(pod, "spec", "containers") or []) or len(container_statuses(pod))
    ready = sum(1 for s in container_statuses(pod) if s.get("ready") is True)
    return ready, total


def restarts(pod: Obj) -> str:
    statuses = container_statuses(pod)
    count = sum(int(s.get("restartCount") or 0) for s in statuses)
    last = [dig(s, "lastState", "terminated", "reason") for s in statuses]
    reasons = sorted({r for r in last if r})
    return f"{count} ({', '.join(reasons)})" if count and reasons else str(count)


def pod_not_ready(pod: Obj) -> bool:
    ready, total = pod_ready(pod)
    return dig(pod, "status", "phase") != "Succeeded" and (total == 0 or ready < total)


def resources_text(container: Obj) -> str:
    parts = []
    for key in ("requests", "limits"):
        values = dig(container, "resources", key)
        if isinstance(values, dict) and values:
            parts.append(f"{key} " + ", ".join(f"{k}={v}" for k, v in sorted(values.items())))
    return "; ".join(parts) or "no requests or limits"


def container_state(status: Obj) -> str:
    state = status.get("state") or {}
    if "running" in state and state["running"] is not None:
        return f"running since {age(dig(state, 'running', 'startedAt'))} ago"
    if state.get("waiting") is not None:
        waiting = state["waiting"]
        message = f": {waiting['message']}" if waiting.get("message") else ""
        return f"waiting ({waiting.get('reason') or 'unknown reason'}{message})"
    if state.get("terminated") is not None:
        done = state["terminated"]
        return f"terminated ({done.get('reason') or 'no reason'}, exit code {done.get('exitCode')})"
    return "unknown"


def event_time(event: Obj) -> str | None:
    for stamp in (
        event.get("lastTimestamp"),
        dig(event, "series", "lastObservedTime"),  # a repeated event's latest occurrence
        event.get("eventTime"),
        event.get("deprecatedLastTimestamp"),
        event.get("firstTimestamp"),
        dig(event, "metadata", "creationTimestamp"),
    ):
        if stamp:
            return str(stamp)
    return None


def sorted_events(events: list[Obj]) -> list[Obj]:
    epoch = datetime.min.replace(tzinfo=UTC)
    return sorted(events, key=lambda e: parse_time(event_time(e)) or epoch, reverse=True)


def event_row(event: Obj, *, with_object: bool, with_namespace: bool = False) -> list[str]:
    # core/v1 events and events.k8s.io/v1 ones (note, regarding, series) alike.
    count = event.get("count") or dig(event, "series", "count") or 1
    message = " ".join(str(event.get("message") or event.get("note") or "").split())
    row = [f"{age(event_time(event))} ago", str(event.get("type") or "?")]
    row.append(str(event.get("reason") or "?"))
    if with_object:
        involved = event.get("involvedObject") or event.get("regarding") or {}
        where = f"{dig(event, 'metadata', 'namespace')}/" if with_namespace else ""
        row.append(f"{involved.get('kind', '?')} {where}{involved.get('name', '?')}")
    repeated = isinstance(count, int) and count > 1
    row.append((f"(x{count}) " if repeated else "") + message)
    return row


class KubeReads:
    """The base of a read toolset's handlers: each looks up the client for the context's
    cluster on every call."""

    def __init__(self, clients: KubeClients) -> None:
        self._clients = clients

    def kube(self, context: ToolContext) -> KubeClient:
        return self._clients.client_for(context.cluster).acting_as(context.identity)

    def audited(self, handler: Handler[Args]) -> Handler[Args]:
        """`handler`, its result or failure naming the identity the cluster saw (audited)."""

        async def run(args: Args, context: ToolContext) -> ToolResult:
            who = self.kube(context).seen_as
            try:
                result = await handler(args, context)
            except ToolFailure as failure:
                failure.acting_as = who
                raise
            return replace(result, acting_as=who)

        return run

    async def events_for(self, kube: KubeClient, namespace: str, kind: str, name: str) -> list[str]:
        """Recent events about one object, or one line saying why they are missing."""
        selector = f"involvedObject.kind={kind},involvedObject.name={name}"
        try:
            listing = await kube.call_json(
                f"list events for {kind.lower()} {namespace}/{name}",
                kube.core.list_namespaced_event,
                namespace,
                field_selector=selector,
            )
        except ToolFailure as exc:
            return [f"Events: unavailable ({exc})"]
        events = sorted_events(items_of(listing))[:EVENTS_IN_DESCRIBE]
        if not events:
            return ["Events: none"]
        rows = [event_row(e, with_object=False) for e in events]
        return ["Events (most recent first):", *("  " + r for r in table(EVENT_HEAD, rows))]
