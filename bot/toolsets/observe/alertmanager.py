"""Alertmanager's API v2 as the tools need it: the active alerts a role may see, and a
silence (a write: the tool layer puts it behind an approval; this module only sends it).

A role sees an alert only when its namespace label is one of the role's namespaces (alerts
without the label only with `cluster_metrics`); a silence must name one admitted namespace
by equality, so it can never quiet another team's alerts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from bot.toolsets.observe.http import Endpoint, ObserveError, ObserveHttp
from bot.toolsets.observe.scope import NamespaceScope

SILENCE_NEEDS_NAMESPACE = (
    'A silence must match one namespace by equality ({label}="…"), one this channel may '
    "read: {allowed}."
)
SILENCE_TOO_LONG = "A silence may last at most {limit:g} h; ask for a shorter one."
SILENCE_NO_MATCHERS = "A silence needs at least one matcher besides the namespace."


@dataclass(frozen=True)
class Alert:
    name: str
    state: str
    labels: dict[str, str]
    annotations: dict[str, str]
    starts_at: str
    silenced_by: tuple[str, ...]


@dataclass(frozen=True)
class SilenceMatcher:
    name: str
    value: str
    is_regex: bool = False
    is_equal: bool = True


@dataclass(frozen=True)
class SilenceRequest:
    matchers: tuple[SilenceMatcher, ...]
    duration: timedelta
    comment: str
    created_by: str


class Alertmanager:
    def __init__(self, http: ObserveHttp, endpoint: Endpoint, max_silence_h: float) -> None:
        self._http = http
        self.endpoint = endpoint
        self._max_silence_h = max_silence_h

    async def ready(self) -> str:
        status = await self._http.get(self.endpoint, "/api/v2/status", {})
        version = (status or {}).get("versionInfo", {}).get("version", "unknown version")
        return f"Alertmanager {version}"

    async def alerts(self, scope: NamespaceScope) -> list[Alert]:
        """Active alerts (silenced and inhibited ones included, marked), the role's only."""
        found = await self._http.get(self.endpoint, "/api/v2/alerts", {"active": "true"})
        admitted = [raw for raw in found or [] if self._admits(scope, raw.get("labels") or {})]
        return sorted((_alert(raw) for raw in admitted), key=lambda a: a.starts_at, reverse=True)

    def check_silence(self, request: SilenceRequest, scope: NamespaceScope) -> None:
        """Refuse (one sentence) a silence that is too long or not inside the role."""
        label = self.endpoint.namespace_label
        if request.duration > timedelta(hours=self._max_silence_h):
            raise ObserveError(SILENCE_TOO_LONG.format(limit=self._max_silence_h))
        namespaces = [
            m.value for m in request.matchers if m.name == label and m.is_equal and not m.is_regex
        ]
        if len(namespaces) != 1 or not scope.admits(namespaces[0]):
            raise ObserveError(
                SILENCE_NEEDS_NAMESPACE.format(label=label, allowed=scope.describe())
            )
        if len(request.matchers) < 2:
            raise ObserveError(SILENCE_NO_MATCHERS)

    async def silence(self, request: SilenceRequest, now: datetime) -> str:
        """Creates the silence; its id."""
        return await self.post_silence(silence_body(request), now, request.duration)

    async def post_silence(self, body: dict[str, Any], now: datetime, duration: timedelta) -> str:
        """Posts a silence body (see `silence_body`) from `now` for `duration`; its id."""
        timed = {**body, "startsAt": _iso(now), "endsAt": _iso(now + duration)}
        created = await self._http.post(self.endpoint, "/api/v2/silences", timed)
        return str((created or {}).get("silenceID", ""))

    async def silences(self, matcher: SilenceMatcher) -> list[dict[str, Any]]:
        """Every silence (active, pending or expired) with this equality matcher."""
        equal = f"{matcher.name}={json.dumps(matcher.value)}"
        found = await self._http.get(self.endpoint, "/api/v2/silences", {"filter": equal})
        return [raw for raw in found or [] if isinstance(raw, dict)]

    def _admits(self, scope: NamespaceScope, labels: dict[str, str]) -> bool:
        namespace = labels.get(self.endpoint.namespace_label)
        return scope.cluster_metrics if namespace is None else scope.admits(namespace)


def silence_body(request: SilenceRequest) -> dict[str, Any]:
    """The silence as Alertmanager's API v2 takes it, without its times (set when sent)."""
    return {
        "matchers": [
            {"name": m.name, "value": m.value, "isRegex": m.is_regex, "isEqual": m.is_equal}
            for m in request.matchers
        ],
        "createdBy": request.created_by,
        "comment": request.comment,
    }


def iso(when: datetime) -> str:
    return _iso(when)


def render_alerts(alerts: list[Alert]) -> str:
    if not alerts:
        return "No active alerts in this channel's namespaces."
    lines = []
    for alert in alerts:
        labels = ", ".join(f"{k}={v}" for k, v in sorted(alert.labels.items()) if k != "alertname")
        summary = alert.annotations.get("summary") or alert.annotations.get("description", "")
        silenced = f" (silenced by {', '.join(alert.silenced_by)})" if alert.silenced_by else ""
        lines.append(f"{alert.name} [{alert.state}] since {alert.starts_at}{silenced}: {labels}")
        if summary:
            lines.append(f"  {summary}")
    return "\n".join(lines)


def _alert(raw: dict[str, Any]) -> Alert:
    labels = {str(k): str(v) for k, v in (raw.get("labels") or {}).items()}
    status = raw.get("status") or {}
    return Alert(
        name=labels.get("alertname", "?"),
        state=str(status.get("state", "active")),
        labels=labels,
        annotations={str(k): str(v) for k, v in (raw.get("annotations") or {}).items()},
        starts_at=str(raw.get("startsAt", "")),
        silenced_by=tuple(str(s) for s in status.get("silencedBy") or ()),
    )


def _iso(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
