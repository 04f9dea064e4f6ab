"""The fields kelpie reads from a Slack event, as a typed value: wrong types are rejected,
never copied into a reply (a non-string `thread_ts`, a list as `text`), and odd Unicode
(a lone surrogate from a `\\ud800` escape) is repaired rather than dropped later."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from bot.model.outbound import valid_unicode

# Subtypes that are still a person writing: everything else (edits, joins, bots) is ignored.
PERSON_SUBTYPES = {"thread_broadcast", "file_share"}


class PersonMessage(BaseModel):
    """A message a person wrote (an `app_mention` or `message` event), as kelpie reads it."""

    model_config = ConfigDict(extra="ignore", frozen=True, strict=True)

    event_id: str
    team_id: str
    channel: str
    user: str
    ts: str
    text: str = ""
    thread_ts: str | None = None
    channel_type: str | None = None
    user_team: str | None = None

    @field_validator("text")
    @classmethod
    def _repair(cls, text: str) -> str:
        return valid_unicode(text)

    @property
    def is_external(self) -> bool:
        """Written by someone from another organisation (a Slack Connect channel)."""
        return self.user_team is not None and self.user_team != self.team_id

    @property
    def reply_ts(self) -> str:
        return self.thread_ts or self.ts


def is_from_a_person(event: Any) -> bool:
    """Not a bot, not an edit or a join: cheap checks that cannot raise on odd values."""
    if not isinstance(event, dict) or event.get("bot_id"):
        return False
    subtype = event.get("subtype")
    return subtype is None or (isinstance(subtype, str) and subtype in PERSON_SUBTYPES)


def person_message(body: dict[str, Any], event: dict[str, Any]) -> PersonMessage | None:
    """The typed message, or None (logged by the caller) when a field has the wrong type."""
    team = body.get("team_id") or event.get("team") or ""
    try:
        return PersonMessage.model_validate(
            {**event, "event_id": body.get("event_id"), "team_id": team}
        )
    except ValidationError:
        return None
