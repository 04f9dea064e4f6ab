"""The outbound policy: what leaves kelpie for a model provider, or lands in an audit row.

Masks secrets in text (bearer tokens, key=value credentials, private keys, JWTs, cloud and
Slack/OpenAI-style access keys, base64 Secret data, values of env vars named like secrets).
Records what kind of secret was masked and where, never the value.

`MaskingGateway` is the request gateway in front of any `ModelGateway`: before each request
it masks every message, applies a size limit and keeps the exact payload it hands on (the
last one per session goes to a `PayloadSink`, for `/kelpie payload`). It does not choose
models and knows no SDK.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from bot.model.types import (
    ModelError,
    ModelGateway,
    ModelReply,
    ModelRequest,
    RequestTag,
    TextSink,
)

log = logging.getLogger(__name__)

MASK = "[MASKED]"

# Env-var style names (upper case) that say they hold a secret: DB_PASSWORD, API_KEY…
_SECRET_NAME = r"[A-Z0-9_]*(?:SECRET|TOKEN|PASSWORD|PASSWD|KEY|CREDENTIAL)[A-Z0-9_]*"
# Config keys in any case that hold credentials, possibly with a prefix
# (aws_secret_access_key, db.password, clientSecret…). A bare "key" is not one.
_CREDENTIAL_KEY = (
    r"(?:password|passwd|pwd|pass|token|secret|api[_-]?key|access[_-]?key|secret[_-]?key|"
    r"client[_-]?secret|private[_-]?key|auth[_-]?token|access[_-]?token|credentials?)"
)
_Q = r"""["']?"""  # an optional quote around a key or value (JSON, YAML, Python reprs)
_VALUE = r"""([^\s"',;&]{3,})"""

# (kind, pattern, group to mask: 0 = whole match)
_RULES: list[tuple[str, re.Pattern[str], int]] = [
    (
        "private_key",
        re.compile(
            r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)"
        ),
        0,
    ),
    ("bearer_token", re.compile(r"(?i)\bbearer\s+([A-Za-z0-9\-._~+/]{8,}=*)"), 1),
    ("basic_auth", re.compile(r"(?i)\bbasic\s+([A-Za-z0-9+/]{8,}={0,2})"), 1),
    ("jwt", re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"), 0),
    ("aws_access_key", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), 0),
    ("gcp_api_key", re.compile(r"\bAIza[0-9A-Za-z_-]{35}\b"), 0),
    ("azure_key", re.compile(r"(?i)\b(?:AccountKey|SharedAccessKey)=([^;\s\"']{8,})"), 1),
    ("azure_sas", re.compile(r"[?&]sig=([A-Za-z0-9%+/=]{16,})"), 1),
    ("slack_token", re.compile(r"\bx(?:ox[abposr]|app)-[A-Za-z0-9-]{8,}"), 0),
    ("api_key", re.compile(r"\b(?:sk|rk|pk)-[A-Za-z0-9_-]{16,}"), 0),
    ("github_token", re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}"), 0),
    # Kubernetes env entries as JSON or a Python repr: {"name": "DB_PASSWORD", "value": "..."}
    (
        "secret_env",
        re.compile(
            r"""["']name["']\s*:\s*["']"""
            + _SECRET_NAME
            + r"""["']\s*,\s*["']value["']\s*:\s*["']([^"']*)["']"""
        ),
        1,
    ),
    # The same as YAML:  - name: DB_PASSWORD\n    value: hunter2
    (
        "secret_env",
        re.compile(r"\bname:\s*" + _Q + _SECRET_NAME + _Q + r"\s*\n\s*value:\s*" + _Q + _VALUE),
        1,
    ),
    # NAME=value / NAME: value / "NAME": "value" where the name says it is a secret.
    ("secret_pair", re.compile(r"\b" + _SECRET_NAME + _Q + r"\s*[=:]\s*" + _Q + _VALUE), 1),
    (
        "credential_pair",
        re.compile(r"(?i)\b[\w.-]*?" + _CREDENTIAL_KEY + _Q + r"\s*[=:]\s*" + _Q + _VALUE),
        1,
    ),
    ("url_password", re.compile(r"\b[a-z][a-z0-9+.-]*://[^/\s:@]+:([^/\s@]+)@"), 1),
]

# A Secret's `data` / `stringData` map, as JSON or YAML: every value in it is masked.
_SECRET_DATA_JSON = re.compile(r"""["'](?:data|stringData)["']\s*:\s*\{([^{}]*)\}""")
_JSON_VALUE = re.compile(r"""(["'][^"']+["']\s*:\s*["'])([^"']*)(["'])""")
_SECRET_DATA_YAML = re.compile(r"(?m)^(?P<indent>[ \t]*)(?:data|stringData):[ \t]*\n")
_YAML_ENTRY = re.compile(r"^(?P<lead>[ \t]+[^:\s]+:[ \t]*)(?P<value>\S.*)$")


@dataclass(frozen=True)
class Masking:
    kind: str
    where: str


def mask_text(text: str, where: str = "") -> tuple[str, list[Masking]]:
    findings: list[Masking] = []
    if "ata" in text:  # cheap pre-check for data / stringData
        text = _mask_secret_data(text, where, findings)
    for kind, pattern, group in _RULES:

        def replace(match: re.Match[str], kind: str = kind, group: int = group) -> str:
            value = match.group(group)
            if not value or value == MASK:
                return match.group(0)
            findings.append(Masking(kind, where))
            whole = match.group(0)
            start = match.start(group) - match.start(0)
            return whole[:start] + MASK + whole[start + len(value) :]

        text = pattern.sub(replace, text)
    return text, findings


def _mask_secret_data(text: str, where: str, findings: list[Masking]) -> str:
    """Mask the values of Secret-style `data`/`stringData` maps (base64 in a Secret)."""
    if "Secret" not in text and "secret" not in text:
        return text

    def json_block(match: re.Match[str]) -> str:
        def value(inner: re.Match[str]) -> str:
            if not inner.group(2) or inner.group(2) == MASK:
                return inner.group(0)
            findings.append(Masking("secret_data", where))
            return inner.group(1) + MASK + inner.group(3)

        block = _JSON_VALUE.sub(value, match.group(1))
        return match.group(0).replace(match.group(1), block)

    text = _SECRET_DATA_JSON.sub(json_block, text)
    if _SECRET_DATA_YAML.search(text) is None:
        return text
    lines = text.split("\n")
    out: list[str] = []
    block_indent: int | None = None
    for line in lines:
        if block_indent is not None:
            indent = len(line) - len(line.lstrip(" \t"))
            entry = _YAML_ENTRY.match(line)
            if line.strip() and indent > block_indent and entry is not None:
                if entry.group("value") != MASK:
                    findings.append(Masking("secret_data", where))
                    line = entry.group("lead") + MASK
                out.append(line)
                continue
            block_indent = None
        header = _SECRET_DATA_YAML.match(line + "\n")
        if header is not None:
            block_indent = len(header.group("indent"))
        out.append(line)
    return "\n".join(out)


def mask_value(value: Any, where: str = "") -> tuple[Any, list[Masking]]:
    """Mask every string inside a JSON-like value (dicts, lists, strings)."""
    if isinstance(value, str):
        return mask_text(value, where)
    if isinstance(value, list):
        findings: list[Masking] = []
        items = []
        for index, item in enumerate(value):
            masked, found = mask_value(item, f"{where}[{index}]")
            items.append(masked)
            findings += found
        return items, findings
    if isinstance(value, dict):
        findings = []
        result = {}
        for key, item in value.items():
            masked, found = mask_value(item, f"{where}.{key}" if where else str(key))
            result[key] = masked
            findings += found
        return result, findings
    return value, []


# --- the request gateway ---------------------------------------------------------------

MAX_MESSAGE_CHARS = 60_000
MAX_REQUEST_CHARS = 400_000


@dataclass(frozen=True)
class SentPayload:
    """Exactly what was handed to the provider gateway for one request (already masked)."""

    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    reasoning_effort: str | None
    maskings: tuple[Masking, ...]
    tag: RequestTag | None = None
    cut_messages: tuple[int, ...] = field(default_factory=tuple)

    def to_json(self) -> str:
        body: dict[str, Any] = {"model": self.model, "messages": self.messages}
        if self.tools:
            body["tools"] = self.tools
        if self.reasoning_effort is not None:
            body["reasoning_effort"] = self.reasoning_effort
        return json.dumps(
            {
                "request": body,
                "masked": [{"kind": m.kind, "where": m.where} for m in self.maskings],
                "cut_messages": list(self.cut_messages),
            },
            indent=2,
            ensure_ascii=False,
        )


class PayloadSink(Protocol):
    async def keep(self, payload: SentPayload) -> None:
        """Remember the payload (the last one per session is enough)."""
        ...


def mask_messages(
    messages: list[dict[str, Any]],
) -> tuple[list[dict[str, Any]], list[Masking]]:
    """Mask message contents and tool-call arguments; roles, ids and names stay as they are."""
    findings: list[Masking] = []
    masked: list[dict[str, Any]] = []
    for index, message in enumerate(messages):
        copy = dict(message)
        content = copy.get("content")
        if isinstance(content, str) and content:
            copy["content"], found = mask_text(content, f"messages[{index}].content")
            findings += found
        calls = copy.get("tool_calls")
        if calls:
            new_calls = []
            for position, call in enumerate(calls):
                function = dict(call.get("function") or {})
                arguments = function.get("arguments")
                if isinstance(arguments, str) and arguments:
                    where = f"messages[{index}].tool_calls[{position}].arguments"
                    function["arguments"], found = mask_text(arguments, where)
                    findings += found
                new_calls.append({**call, "function": function})
            copy["tool_calls"] = new_calls
        masked.append(copy)
    return masked, findings


class MaskingGateway:
    """Wraps a ModelGateway: masks, limits and records every request before it leaves."""

    def __init__(
        self,
        inner: ModelGateway,
        sink: PayloadSink | None = None,
        *,
        max_message_chars: int = MAX_MESSAGE_CHARS,
        max_request_chars: int = MAX_REQUEST_CHARS,
    ) -> None:
        self._inner = inner
        self._sink = sink
        self._max_message_chars = max_message_chars
        self._max_request_chars = max_request_chars
        self.last_payload: SentPayload | None = None

    @property
    def model_name(self) -> str:
        return self._inner.model_name

    async def complete(self, request: ModelRequest, on_text: TextSink) -> ModelReply:
        messages, findings = mask_messages(request.messages)
        cut: list[int] = []
        for index, message in enumerate(messages):
            content = message.get("content")
            if isinstance(content, str) and len(content) > self._max_message_chars:
                note = (
                    f"\n[cut by kelpie: {len(content):,} characters, "
                    f"limit {self._max_message_chars:,} per message]"
                )
                message["content"] = content[: self._max_message_chars] + note
                cut.append(index)
        size = len(json.dumps(messages)) + len(json.dumps(request.tools))
        if size > self._max_request_chars:
            raise ModelError(
                f"The request is too large to send ({size:,} characters, limit "
                f"{self._max_request_chars:,}): ask a narrower question or start a new thread.",
                retryable=False,
                detail=f"request of {size} characters over the limit",
            )
        payload = SentPayload(
            model=self._inner.model_name,
            messages=messages,
            tools=list(request.tools),
            reasoning_effort=request.reasoning_effort,
            maskings=tuple(findings),
            tag=request.tag,
            cut_messages=tuple(cut),
        )
        self.last_payload = payload
        if findings:
            kinds = sorted({f.kind for f in findings})
            log.info("masked %d secret(s) before a model request: %s", len(findings), kinds)
        if self._sink is not None:
            try:
                await self._sink.keep(payload)
            except Exception:  # the payload log is a record, not a reason to fail the turn
                log.exception("could not keep the payload of a model request")
        return await self._inner.complete(replace(request, messages=messages), on_text)
