"""The outbound policy: what leaves kelpie for a model provider, or lands in an audit row.

Masks secrets in text (bearer tokens, key=value credentials, private keys, JWTs, cloud and
Slack/OpenAI-style access keys, values of env vars named like secrets). Records what kind of
secret was masked and where, never the value.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

MASK = "[MASKED]"

# Env-var style names (upper case) that say they hold a secret: DB_PASSWORD, API_KEY…
_SECRET_NAME = r"[A-Z0-9_]*(?:SECRET|TOKEN|PASSWORD|PASSWD|KEY|CREDENTIAL)[A-Z0-9_]*"
# Lower-case config keys that hold credentials.
_CREDENTIAL_KEY = (
    r"(?:password|passwd|pwd|pass|token|secret|api[_-]?key|access[_-]?key|secret[_-]?key|"
    r"client[_-]?secret|private[_-]?key|auth[_-]?token|access[_-]?token|credentials?)"
)

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
    ("jwt", re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"), 0),
    ("aws_access_key", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), 0),
    ("slack_token", re.compile(r"\bx(?:ox[abposr]|app)-[A-Za-z0-9-]{8,}"), 0),
    ("api_key", re.compile(r"\b(?:sk|rk|pk)-[A-Za-z0-9_-]{16,}"), 0),
    ("github_token", re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}"), 0),
    # Kubernetes env entries as JSON: {"name": "DB_PASSWORD", "value": "..."}
    (
        "secret_env",
        re.compile(r'"name"\s*:\s*"' + _SECRET_NAME + r'"\s*,\s*"value"\s*:\s*"([^"]*)"'),
        1,
    ),
    # NAME=value / NAME: value where the name says it is a secret (env, config, URLs).
    (
        "secret_pair",
        re.compile(r"\b" + _SECRET_NAME + r"""\s*[=:]\s*["']?([^\s"',;&]{3,})"""),
        1,
    ),
    (
        "credential_pair",
        re.compile(r"(?i)\b" + _CREDENTIAL_KEY + r"""["']?\s*[=:]\s*["']?([^\s"',;&]{3,})"""),
        1,
    ),
    ("url_password", re.compile(r"\b[a-z][a-z0-9+.-]*://[^/\s:@]+:([^/\s@]+)@"), 1),
]


@dataclass(frozen=True)
class Masking:
    kind: str
    where: str


def mask_text(text: str, where: str = "") -> tuple[str, list[Masking]]:
    findings: list[Masking] = []
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
