"""A webhook's notification as typed values: Alertmanager's payload version 4 and
Grafana's alerting webhook (the same shape, version 1). Everything in it is untrusted text."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from bot.errors import KelpieError

# The payload version each receiver type speaks.
VERSIONS = {"alertmanager": "4", "grafana": "1"}


class PayloadError(KelpieError):
    """Not a notification this receiver understands (answered 400)."""


@dataclass(frozen=True)
class Alert:
    status: str
    labels: dict[str, str]
    annotations: dict[str, str]
    starts_at: str
    ends_at: str
    generator_url: str
    fingerprint: str

    @property
    def name(self) -> str:
        return self.labels.get("alertname", "(no alertname)")

    @property
    def identity(self) -> str:
        """The alert across notifications: its fingerprint (or its labels), and when it
        started (a new start after a resolve is a new alert)."""
        who = self.fingerprint or json.dumps(self.labels, sort_keys=True)
        return f"{who}@{self.starts_at}"

    @property
    def version(self) -> str:
        """The alert and what it says now (what a header shows of it)."""
        said = json.dumps([self.annotations, self.generator_url], sort_keys=True)
        return f"{self.identity}{self.status}{said}"


@dataclass(frozen=True)
class Notification:
    receiver: str  # the receiver type: alertmanager | grafana
    group_key: str
    status: str  # firing | resolved
    group_labels: dict[str, str]
    common_labels: dict[str, str]
    alerts: tuple[Alert, ...]

    @property
    def group_id(self) -> str:
        return f"{self.receiver}:{self.group_key}"

    @property
    def firing(self) -> tuple[Alert, ...]:
        return tuple(alert for alert in self.alerts if alert.status == "firing")

    @property
    def dedupe_key(self) -> str:
        """Equal for a redelivery of this notification, and only for it: a repeat whose
        alerts say something new (an annotation, a status) is a new notification."""
        parts = [self.group_key, self.status, *sorted(a.version for a in self.alerts)]
        digest = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]
        return f"alert:{self.receiver}:{digest}"

    def labels(self) -> dict[str, str]:
        """What routes match: the labels every alert shares, else the first alert's."""
        first = self.alerts[0].labels if self.alerts else {}
        return {**first, **self.group_labels, **self.common_labels}


def parse(receiver: str, body: Any) -> Notification:
    if not isinstance(body, dict):
        raise PayloadError("the body is not a JSON object")
    if str(body.get("version")) != VERSIONS[receiver]:
        raise PayloadError(f"payload version {body.get('version')!r} is not {VERSIONS[receiver]}")
    alerts = body.get("alerts")
    group_key = body.get("groupKey")
    if not isinstance(alerts, list) or not isinstance(group_key, str) or not group_key:
        raise PayloadError("groupKey or alerts is missing")
    return Notification(
        receiver=receiver,
        group_key=group_key,
        status=_text(body.get("status")) or "firing",
        group_labels=_strings(body.get("groupLabels")),
        common_labels=_strings(body.get("commonLabels")),
        alerts=tuple(_alert(item) for item in alerts),
    )


def _alert(item: Any) -> Alert:
    if not isinstance(item, dict):
        raise PayloadError("an alert is not a JSON object")
    return Alert(
        status=_text(item.get("status")) or "firing",
        labels=_strings(item.get("labels")),
        annotations=_strings(item.get("annotations")),
        starts_at=_text(item.get("startsAt")),
        ends_at=_text(item.get("endsAt")),
        generator_url=_text(item.get("generatorURL")),
        fingerprint=_text(item.get("fingerprint")),
    )


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _strings(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        return {}
    return {str(k): str(v) for k, v in value.items()}


def timestamp(text: str) -> datetime | None:
    """An RFC 3339 time from the payload; None for Alertmanager's zero time or garbage."""
    try:
        found = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if found.year < 1900:
        return None
    return found if found.tzinfo else found.replace(tzinfo=UTC)
