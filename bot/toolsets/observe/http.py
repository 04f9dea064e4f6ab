"""HTTP to Prometheus, Loki and Alertmanager: one session, each instance's auth and TLS, a
deadline per request, bounded bodies, and every failure as one sentence.

It knows nothing of queries or scoping (`scope.py`) nor of what the answers mean
(`prometheus.py`, `loki.py`, `alertmanager.py`).
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from bot.errors import KelpieError

# An answer larger than this is refused rather than parsed: the tools summarise, and a
# body this size would only stall the loop.
MAX_BODY_BYTES = 8 * 1024 * 1024

UNREACHABLE = "{title} {name} ({url}) is unreachable: {reason}."
TIMED_OUT = "{title} {name} did not answer within {timeout:g} s; narrow the query or the window."
TOO_LARGE = "{title} {name} answered more than {limit} MB; narrow the query or the window."
REJECTED = "{title} {name} refused the request ({status}): {reason}."
NOT_JSON = "{title} {name} answered something that is not JSON (HTTP {status})."
WINDOW_TOO_LONG = "The window is {hours:g} h; at most {limit:g} h may be queried at once."
WINDOW_BACKWARDS = "The window ends before it starts; give start before end."
AUTH_FAILED = "{title} {name} refused kelpie's credentials (HTTP {status}); check its auth."


class ObserveError(KelpieError):
    """A Prometheus, Loki or Alertmanager call that failed: `str(error)` is the sentence."""


@dataclass(frozen=True)
class Endpoint:
    """One configured instance, its secrets already read from the environment."""

    kind: str
    name: str
    url: str
    cluster: str | None
    timeout_s: float
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    namespace_label: str = "namespace"
    external_url: str | None = None
    ca_file: str | None = None
    insecure_skip_verify: bool = False

    @property
    def title(self) -> str:
        return {"prometheus": "Prometheus", "loki": "Loki"}.get(self.kind, "Alertmanager")

    def ssl_context(self) -> ssl.SSLContext | bool:
        if self.insecure_skip_verify:
            return False
        if self.ca_file:
            return ssl.create_default_context(cafile=self.ca_file)
        return True

    def sentence(self, template: str, **values: Any) -> str:
        return template.format(title=self.title, name=self.name, url=self.url, **values)


def check_window(start: float, end: float, max_hours: float) -> None:
    """One sentence for a window that runs backwards or is longer than the config allows."""
    if end <= start:
        raise ObserveError(WINDOW_BACKWARDS)
    hours = (end - start) / 3600
    if hours > max_hours:
        raise ObserveError(WINDOW_TOO_LONG.format(hours=hours, limit=max_hours))


class ObserveHttp:
    """The one client session the observability toolsets share (built by the composition
    root, closed at stop)."""

    def __init__(self, max_body_bytes: int = MAX_BODY_BYTES) -> None:
        self._max_body_bytes = max_body_bytes
        self._session: aiohttp.ClientSession | None = None

    async def get(self, endpoint: Endpoint, path: str, params: Mapping[str, str]) -> Any:
        return await self._request(endpoint, "GET", path, params=params)

    async def get_text(self, endpoint: Endpoint, path: str) -> str:
        """A plain-text answer (Loki's `/ready` says `ready`), on one line and short."""
        answer = await self._request(endpoint, "GET", path, text=True)
        return _reason(None, str(answer))

    async def post(self, endpoint: Endpoint, path: str, body: Any) -> Any:
        return await self._request(endpoint, "POST", path, body=body)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def _request(
        self,
        endpoint: Endpoint,
        method: str,
        path: str,
        params: Mapping[str, str] | None = None,
        body: Any = None,
        text: bool = False,
    ) -> Any:
        url = endpoint.url.rstrip("/") + path
        try:
            async with asyncio.timeout(endpoint.timeout_s):
                async with self._client().request(
                    method,
                    url,
                    params=params,
                    json=body,
                    headers=dict(endpoint.headers),
                    ssl=endpoint.ssl_context(),
                    allow_redirects=False,
                ) as response:
                    raw = await response.content.read(self._max_body_bytes + 1)
                    return self._decode(endpoint, response.status, raw, text)
        except TimeoutError as error:
            raise ObserveError(endpoint.sentence(TIMED_OUT, timeout=endpoint.timeout_s)) from error
        except aiohttp.ClientError as error:
            reason = str(error) or type(error).__name__
            raise ObserveError(endpoint.sentence(UNREACHABLE, reason=reason)) from error

    def _decode(self, endpoint: Endpoint, status: int, raw: bytes, text_wanted: bool) -> Any:
        if len(raw) > self._max_body_bytes:
            limit = self._max_body_bytes // (1024 * 1024)
            raise ObserveError(endpoint.sentence(TOO_LARGE, limit=limit))
        if status in (401, 403):
            raise ObserveError(endpoint.sentence(AUTH_FAILED, status=status))
        text = raw.decode("utf-8", errors="replace")
        try:
            decoded = json.loads(text) if text.strip() else None
        except json.JSONDecodeError:
            decoded = None
        if status >= 300:
            raise ObserveError(
                endpoint.sentence(REJECTED, status=status, reason=_reason(decoded, text))
            )
        if text_wanted:
            return text
        if decoded is None and text.strip():
            raise ObserveError(endpoint.sentence(NOT_JSON, status=status))
        return decoded

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        return self._session


def _reason(decoded: Any, text: str) -> str:
    """The server's own words: Prometheus' `error`, Alertmanager's `message`, else the text
    (Loki answers errors as plain text), on one line and short."""
    if isinstance(decoded, dict):
        for key in ("error", "message"):
            if isinstance(decoded.get(key), str):
                text = decoded[key]
                break
    line = " ".join(text.split()).rstrip(".")
    return (line[:300] + "…") if len(line) > 300 else line or "no reason given"
