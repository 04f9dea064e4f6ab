"""What went wrong with a model call, in one sentence a person can act on.

Each provider client maps its own failures (LiteLLM's exception types, or the HTTP status
and OpenAI error code on the wire) to a `Failure`; this module alone turns a failure into
the `ModelError` the engine and the person see, so both clients say the same thing, with
the same `retryable` and `sent` flags, for the same fault.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import StrEnum

from bot.model.types import ModelError, ProviderSettings

log = logging.getLogger(__name__)


class Failure(StrEnum):
    TIMEOUT = "timeout"
    RATE_LIMITED = "rate limited"
    BAD_KEY = "bad key"
    FORBIDDEN = "forbidden"
    UNKNOWN_MODEL = "unknown model"
    CONTEXT_WINDOW = "context window"
    BROKE_OFF = "broke off"
    BAD_REQUEST = "bad request"
    UNREACHABLE = "unreachable"
    SERVER_ERROR = "server error"
    REFUSED = "refused"
    LINE_TOO_LONG = "line too long"
    REPLY_TOO_LARGE = "reply too large"
    REDIRECTED = "redirected"
    UNKNOWN = "unknown"


# What one streamed reply may hold (the wire client stops reading past them): a server, or
# anything between, that streams without end must not fill the memory or stall the loop.
MAX_LINE_BYTES = 1 << 20
MAX_REPLY_BYTES = 4 << 20

_RETRYABLE = frozenset(
    {
        Failure.TIMEOUT,
        Failure.RATE_LIMITED,
        Failure.BROKE_OFF,
        Failure.UNREACHABLE,
        Failure.SERVER_ERROR,
        Failure.UNKNOWN,
    }
)
# OpenAI's code for an over-long conversation, and the sentence servers that copy OpenAI's
# errors without its codes (vLLM, llama.cpp) put in the message instead.
CONTEXT_CODE = "context_length_exceeded"
_CONTEXT_PHRASES = ("maximum context length", "context window", CONTEXT_CODE)


def failure_of_status(status: int, code: str | None = None, message: str = "") -> Failure:
    """The failure an HTTP error status (with OpenAI's error `code` and message) means."""
    lowered = message.lower()
    if code == CONTEXT_CODE or (
        status in (400, 413, 422) and any(p in lowered for p in _CONTEXT_PHRASES)
    ):
        return Failure.CONTEXT_WINDOW
    known = {
        429: Failure.RATE_LIMITED,
        401: Failure.BAD_KEY,
        403: Failure.FORBIDDEN,
        404: Failure.UNKNOWN_MODEL,
        400: Failure.BAD_REQUEST,
        422: Failure.BAD_REQUEST,
    }
    if status in known:
        return known[status]
    if status >= 500:
        return Failure.SERVER_ERROR
    if 400 <= status < 500:
        return Failure.REFUSED
    return Failure.UNKNOWN


@dataclass(frozen=True)
class ModelCall:
    """Which profile and model a call was for: what the sentences point the operator at."""

    profile: str
    model: str
    timeout_s: float

    @classmethod
    def of(cls, settings: ProviderSettings) -> ModelCall:
        return cls(settings.profile, settings.model, settings.timeout_s)

    def error(
        self, failure: Failure, *, detail: str, sent: bool, status: int | None = None
    ) -> ModelError:
        """The ModelError for `failure`; `detail` (already free of the key) is logged."""
        log.warning("model call to %s failed: %s", self.model, detail)
        return ModelError(
            self._sentence(failure, status),
            retryable=failure in _RETRYABLE,
            detail=detail,
            sent=sent,
        )

    def _sentence(self, failure: Failure, status: int | None) -> str:
        where = f"models.profiles.{self.profile}"
        match failure:
            case Failure.TIMEOUT:
                return f"The model server did not answer within {self.timeout_s:g} s."
            case Failure.RATE_LIMITED:
                return "The model server is rate limiting requests (HTTP 429)."
            case Failure.BAD_KEY:
                return f"The model rejected the API key: check {where}.auth."
            case Failure.FORBIDDEN:
                return f"The model server refused access (HTTP 403): check {where}.auth."
            case Failure.UNKNOWN_MODEL:
                return (
                    f"The model server does not know model {self.model!r} (HTTP 404): "
                    f"check {where}.model and api_base."
                )
            case Failure.CONTEXT_WINDOW:
                return (
                    "The conversation no longer fits the model's context window: "
                    "start a new thread."
                )
            case Failure.BROKE_OFF:
                return BROKE_OFF
            case Failure.BAD_REQUEST:
                return (
                    f"The model server rejected the request (HTTP {status or 400}): "
                    f"check {where}.model and its options."
                )
            case Failure.UNREACHABLE:
                return f"The model server could not be reached: check {where}.api_base."
            case Failure.SERVER_ERROR:
                return f"The model server did not answer (HTTP {status})."
            case Failure.REFUSED:
                return f"The model server refused the request (HTTP {status})."
            case Failure.LINE_TOO_LONG:
                return (
                    f"The model server sent a line longer than {_mb(MAX_LINE_BYTES)}, "
                    "so kelpie stopped reading the answer."
                )
            case Failure.REPLY_TOO_LARGE:
                return (
                    f"The model's answer grew past {_mb(MAX_REPLY_BYTES)}, "
                    "so kelpie stopped reading it: ask for something shorter."
                )
            case Failure.REDIRECTED:
                return (
                    "The model server redirected the request to another address, which "
                    f"kelpie does not follow: check {where}.api_base."
                )
        return "The model server could not be reached."


BROKE_OFF = "The model's answer broke off before it finished."


def _mb(size: int) -> str:
    return f"{size / (1 << 20):g} MB"


def broke_off(detail: str) -> ModelError:
    """A stream that ended (cleanly or not) without the model saying it had finished."""
    return ModelError(BROKE_OFF, retryable=True, detail=detail, sent=True)
