"""Logging setup: plain text for a terminal, or one JSON object per line (`logging.format:
json`) for a log pipeline. Every line carries the session, turn and Slack event it belongs
to, from context variables that the adapter and the session set while they work; asyncio
copies them into the tasks started meanwhile, so a turn's lines keep its ids."""

from __future__ import annotations

import contextvars
import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from bot.config import LogFormat, LoggingConfig
from bot.model.outbound import install_log_masking

# Immutable pairs: every bind makes a new value, so a task never changes its parent's ids.
_CONTEXT: contextvars.ContextVar[tuple[tuple[str, str], ...]] = contextvars.ContextVar(
    "kelpie_log_context", default=()
)
# The HTTP and model libraries are chatty at INFO and may echo request details.
_NOISY = (
    "LiteLLM",
    "litellm",
    "httpx",
    "httpx2",
    "urllib3",
    "slack_sdk",
    "slack_bolt",
    "aiohttp.access",
)


def bind(**ids: str | int | None) -> None:
    """Add ids (session_id, turn_id, event_id) to this task's log lines from here on."""
    merged = dict(_CONTEXT.get())
    merged.update({key: str(value) for key, value in ids.items() if value is not None})
    _CONTEXT.set(tuple(merged.items()))


def current() -> dict[str, str]:
    return dict(_CONTEXT.get())


@contextmanager
def bound(**ids: str | int | None) -> Iterator[None]:
    """The ids for the lines logged inside the block only."""
    token = _CONTEXT.set(_CONTEXT.get())
    bind(**ids)
    try:
        yield
    finally:
        _CONTEXT.reset(token)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            **current(),
        }
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:  # masked by the handler's MaskingLogFilter
            line["exception"] = record.exc_text
        return json.dumps(line, ensure_ascii=False)


class _TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        ids = " ".join(f"{key}={value}" for key, value in _CONTEXT.get())
        return f"{text} [{ids}]" if ids else text


def _expected_bolt_warning(record: logging.LogRecord) -> bool:
    # Bolt reads $SLACK_BOT_TOKEN by itself and warns on every start that the client kelpie
    # passes wins over it: that is the intent, not something an operator should act on.
    return not str(record.msg).startswith("As you gave `client` as well")


def configure(settings: LoggingConfig, *, level: str | None = None) -> None:
    """Root logging for the process; `level` (e.g. $KELPIE_LOG_LEVEL) overrides the config."""
    handler = logging.StreamHandler()
    if settings.format is LogFormat.JSON:
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(_TextFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(_expected_bolt_warning)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    install_log_masking(root)  # no secret reaches the log, whoever logged it
    root.setLevel((level or settings.level).upper())
    for noisy in _NOISY:
        logging.getLogger(noisy).setLevel(logging.WARNING)
