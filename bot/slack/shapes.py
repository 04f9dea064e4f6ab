"""The shape of a Slack request body, checked before Bolt sees it (HTTP mode): the fields
that kelpie's listeners and Bolt itself read (to build its context and match listeners)
must have the JSON types Slack sends, or Bolt raises deep inside its dispatch. Fields not
named here are not looked at; a null is taken as absent, as both read it.

`shape_problem` names the first field with the wrong type, e.g. "event.user is a list"."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Obj:
    """A JSON object whose named fields have these shapes; `required` ones are present."""

    fields: Mapping[str, Shape]
    required: frozenset[str] = field(default_factory=frozenset)


@dataclass(frozen=True)
class Items:
    """A JSON array of one shape; `nonempty`: at least one item."""

    item: Shape
    nonempty: bool = False


# The alternatives a value may take (a JSON type, an object, an array).
Shape = tuple[type | Obj | Items, ...]

TEXT: Shape = (str,)
# A slash command is a form: its flags come as the strings "true" / "false".
FLAG: Shape = (bool, str)
_TEAM: Shape = (str, Obj({"id": TEXT, "enterprise_id": TEXT, "domain": TEXT}))
_USER: Shape = (str, Obj({"id": TEXT, "team_id": TEXT, "name": TEXT, "username": TEXT}))
_CHANNEL: Shape = (str, Obj({"id": TEXT, "name": TEXT}))
_MESSAGE_FIELDS: dict[str, Shape] = {
    name: TEXT for name in ("ts", "thread_ts", "text", "subtype", "bot_id", "user_team")
} | {"user": _USER, "team": _TEAM, "channel": _CHANNEL}
_MESSAGE: Shape = (Obj(_MESSAGE_FIELDS),)
_EVENT: Shape = (
    Obj(
        _MESSAGE_FIELDS
        | {
            "type": TEXT,
            "event_ts": TEXT,
            "channel_type": TEXT,
            "enterprise": (str, Obj({"id": TEXT})),
            "item": (Obj({"channel": TEXT, "ts": TEXT}),),
            "message": _MESSAGE,
            "previous_message": _MESSAGE,
            "assistant_thread": (Obj({"channel_id": TEXT, "thread_ts": TEXT}),),
            "function_execution_id": TEXT,
            "bot_access_token": TEXT,
            "inputs": (dict,),
        },
        required=frozenset({"type"}),
    ),
)
_AUTHORIZATION: Shape = (
    Obj(
        {
            "team_id": TEXT,
            "enterprise_id": TEXT,
            "user_id": TEXT,
            "is_enterprise_install": FLAG,
            "is_bot": FLAG,
        }
    ),
)
_ACTION: Shape = (
    Obj(
        {"action_id": TEXT, "block_id": TEXT, "value": TEXT, "type": TEXT, "action_ts": TEXT},
        required=frozenset({"action_id"}),
    ),
)
_STRINGS = (
    "type team_id enterprise_id api_app_id event_id user_id channel_id channel_name command "
    "text response_url trigger_id token challenge context_team_id context_enterprise_id "
    "callback_id function_execution_id bot_access_token"
).split()
_VIEW_FIELDS = ("id", "team_id", "app_installed_team_id", "callback_id")
BODY = Obj(
    {name: TEXT for name in _STRINGS}
    | {
        "is_enterprise_install": FLAG,
        "is_ext_shared_channel": FLAG,
        "authorizations": (Items(_AUTHORIZATION),),
        "event": _EVENT,
        "team": _TEAM,
        "enterprise": (str, Obj({"id": TEXT})),
        "user": _USER,
        "channel": _CHANNEL,
        "actions": (Items(_ACTION),),
        "container": (Obj({n: TEXT for n in ("type", "message_ts", "thread_ts", "channel_id")}),),
        "message": _MESSAGE,
        "view": (Obj({n: TEXT for n in _VIEW_FIELDS}),),
        "response_urls": (Items((Obj({"response_url": TEXT, "channel_id": TEXT}),)),),
        "function_data": (Obj({"execution_id": TEXT, "inputs": (dict,)}),),
    }
)
# What a request of each type cannot go without (Bolt indexes them to match a listener).
REQUIRED: Mapping[str, Obj] = {
    "event_callback": Obj({"event": _EVENT}, required=frozenset({"event"})),
    "block_actions": Obj({"actions": (Items(_ACTION, nonempty=True),)}, frozenset({"actions"})),
}


def shape_problem(body: Any) -> str | None:
    """None when the body has the shape Slack sends; else the first wrong field, named."""
    if not isinstance(body, dict):
        return f"the body is {_kind(body)}, not an object"
    problem = _object(body, BODY, "body")
    kind = body.get("type")
    if problem is None and isinstance(kind, str) and kind in REQUIRED:
        problem = _object(body, REQUIRED[kind], "body")
    return problem


def _value(value: Any, shape: Shape, path: str) -> str | None:
    if value is None:
        return None
    for alternative in shape:
        if isinstance(alternative, Obj) and isinstance(value, dict):
            return _object(value, alternative, path)
        if isinstance(alternative, Items) and isinstance(value, list):
            return _items(value, alternative, path)
        if isinstance(alternative, type) and isinstance(value, alternative):
            return None
    return f"{path} is {_kind(value)}"


def _object(value: dict[str, Any], shape: Obj, path: str) -> str | None:
    for name in shape.required:
        if value.get(name) is None:
            return f"{path}.{name} is missing"
    for name, inner in shape.fields.items():
        problem = _value(value.get(name), inner, f"{path}.{name}")
        if problem is not None:
            return problem
    return None


def _items(value: list[Any], shape: Items, path: str) -> str | None:
    if shape.nonempty and not value:
        return f"{path} is empty"
    for index, item in enumerate(value):
        problem = _value(item, shape.item, f"{path}[{index}]")
        if problem is not None:
            return problem
    return None


def _kind(value: Any) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}
    return names.get(type(value), "a number" if isinstance(value, int | float) else "null")
