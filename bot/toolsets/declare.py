"""One declaration per tool: its arguments as a typed model, from which both the JSON schema
the model sees and the validation come.

`ToolArgs` is the base of every argument model (unknown arguments refused, no type
coercion). `schema_of` renders a model as the compact JSON schema the model is offered (no
titles, optional fields as their plain type, the `null` of "absent" never spelt out), and
`parse_args` validates a call's arguments against it, turning the first problem into the
one sentence the model gets back (a ToolArgumentError). The shared argument shapes
(namespace, object name, selectors) are declared here once, so every toolset says
`namespace: ListNamespace = None` rather than repeating a schema and a check.

This module knows no Kubernetes client and no pipeline: toolsets import it, nothing else.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Protocol, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import PydanticCustomError, core_schema

from bot.toolsets.spec import (
    Tool,
    ToolArgumentError,
    ToolContext,
    ToolFailure,
    ToolKind,
    ToolResult,
    ToolScope,
    WriteOperation,
)

# Kubernetes object names: RFC 1123 labels/subdomains.
# Matched whole (fullmatch): `$` would also accept a trailing newline.
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
_KIND = re.compile(r"[A-Z][A-Za-z0-9]{0,62}")

# The error type whose message is already the sentence for the model.
_SENTENCE = "kelpie_argument"


class ToolArgs(BaseModel):
    """The base of every tool's argument model."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class DeclaredWrite(WriteOperation, Protocol):
    """A write operation and the argument model its `prepare` validates against."""

    @property
    def args_model(self) -> type[ToolArgs]: ...


Args = TypeVar("Args", bound=ToolArgs)


def _refuse(sentence: str) -> PydanticCustomError:
    return PydanticCustomError(_SENTENCE, sentence)


def checked(check: Callable[[str, Any], Any]) -> BeforeValidator:
    """A field check that sees the raw value and its argument name and raises
    ToolArgumentError with the sentence the model gets back (so a wrong type reads like a
    wrong value); it returns the value to validate against the field's type."""

    def run(value: Any, info: core_schema.ValidationInfo) -> Any:
        try:
            return check(info.field_name or "value", value)
        except ToolArgumentError as problem:
            raise _refuse(str(problem)) from None

    return BeforeValidator(run)


def _namespace(key: str, value: Any) -> str | None:
    if value is None or value == "":
        return None  # the channel's default (see `resolve_namespace`)
    if value == "*":
        return value
    if not isinstance(value, str) or not DNS_LABEL.fullmatch(value):
        raise ToolArgumentError(f"{key} {value!r} is not a valid Kubernetes namespace name.")
    return value


def _name(key: str, value: Any) -> str:
    if value is None or value == "":
        raise ToolArgumentError(f"{key} is required.")
    if not isinstance(value, str) or not DNS_SUBDOMAIN.fullmatch(value):
        raise ToolArgumentError(f"{key} {value!r} is not a valid Kubernetes object name.")
    return value


def _optional_name(key: str, value: Any) -> str | None:
    return None if value is None or value == "" else _name(key, value)


def _text(key: str, value: Any, max_len: int = 512) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > max_len:
        raise ToolArgumentError(f"{key} must be a string of at most {max_len} characters.")
    return value


def _kind(key: str, value: Any) -> str | None:
    value = _text(key, value, max_len=63)
    if value is not None and not _KIND.fullmatch(value):
        raise ToolArgumentError(f"{key} {value!r} must be a Kubernetes kind such as Pod.")
    return value


# --- the shared shapes: a validator each, the description beside the field ---------------

# A required Kubernetes object name: `Annotated[str, NAME, Field(description=...)]`.
NAME = checked(_name)
# An optional one ("" reads as absent).
OPTIONAL_NAME = checked(_optional_name)
# Optional free text of at most 512 characters ("" reads as absent).
TEXT = checked(_text)


def limited_text(max_len: int, *, required: bool = False) -> BeforeValidator:
    """Free text of at most `max_len` characters ("" reads as absent)."""

    def check(key: str, value: Any) -> str | None:
        found = _text(key, value, max_len)
        if found is None and required:
            raise ToolArgumentError(f"{key} is required.")
        return found

    return checked(check)


# An optional Kubernetes kind, e.g. Pod.
KIND = checked(_kind)

# A namespace to list in: a name, "*" for all, or absent for the channel's default.
ListNamespace = Annotated[
    str | None,
    checked(_namespace),
    Field(description='"*" for all; default: the channel\'s.'),
]
# The namespace of one object: a name, or absent for the channel's default.
ObjectNamespace = Annotated[
    str | None,
    checked(_namespace),
    Field(description="Default: the channel's."),
]
LabelSelector = Annotated[
    str | None,
    TEXT,
    Field(description='e.g. "app=web,tier!=db"'),
]
FieldSelector = Annotated[
    str | None,
    TEXT,
    Field(description='e.g. "status.phase=Running"'),
]


class NamespacedObject(ToolArgs):
    """One namespaced object by name (describe_*)."""

    namespace: ObjectNamespace = None
    name: Annotated[str, NAME]


class Selected(ToolArgs):
    """Cluster-scoped objects, optionally by label."""

    label_selector: LabelSelector = None


class NamespacedList(ToolArgs):
    """Objects of one namespace (or all), optionally by label."""

    namespace: ListNamespace = None
    label_selector: LabelSelector = None


def name_arg(args: dict[str, Any], key: str = "name") -> str:
    """A required object name read from a plain arguments dict (checked like `NAME`)."""
    return _name(key, args.get(key))


def namespace_arg(args: dict[str, Any], context: ToolContext, *, allow_all: bool) -> str | None:
    """The namespace read from a plain arguments dict (checked like `ObjectNamespace`)."""
    value = _namespace("namespace", args.get("namespace"))
    return resolve_namespace(value, context, allow_all=allow_all)


def resolve_namespace(value: str | None, context: ToolContext, *, allow_all: bool) -> str | None:
    """The namespace a validated argument means here: None for all namespaces (only when
    allowed), else the argument or the channel's default."""
    if value is None:
        value = context.default_namespace
    if value is None or value == "*":
        if allow_all:
            return None
        raise ToolArgumentError("namespace is required (no default namespace is set here).")
    return value


# --- the schema the model sees ----------------------------------------------------------


class _CompactSchema(GenerateJsonSchema):
    """Pydantic's schema without what a model does not need: titles, `null` alternatives
    and `default: null` of optional arguments."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False

    def nullable_schema(self, schema: core_schema.NullableSchema) -> JsonSchemaValue:
        return self.generate_inner(schema["schema"])

    def default_schema(self, schema: core_schema.WithDefaultSchema) -> JsonSchemaValue:
        if schema.get("default", ...) is None:
            return self.generate_inner(schema["schema"])
        return super().default_schema(schema)

    def model_schema(self, schema: core_schema.ModelSchema) -> JsonSchemaValue:
        generated = super().model_schema(schema)
        generated.pop("title", None)
        generated.pop("description", None)  # the model's docstring is for us, not the model
        return generated


def schema_of(model: type[ToolArgs]) -> dict[str, Any]:
    """The JSON schema of the arguments object, as offered to the model (nested argument
    objects written in place: a model reads them more reliably than references)."""
    schema = model.model_json_schema(schema_generator=_CompactSchema)
    definitions = schema.pop("$defs", {})
    return dict(_inline(schema, definitions))


def _inline(node: Any, definitions: dict[str, Any]) -> Any:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            return _inline(definitions[ref.removeprefix("#/$defs/")], definitions)
        return {key: _inline(value, definitions) for key, value in node.items()}
    if isinstance(node, list):
        return [_inline(value, definitions) for value in node]
    return node


# --- validation: the first problem, as one sentence ------------------------------------


def parse_args(model: type[Args], args: Any) -> Args:
    """`args` validated against `model`; raises ToolArgumentError with one sentence."""
    if not isinstance(args, dict):
        raise ToolArgumentError("arguments must be a JSON object.")
    unknown = sorted(set(args) - set(model.model_fields))
    if unknown:
        known = ", ".join(sorted(model.model_fields)) or "none"
        raise ToolArgumentError(f"unknown argument(s) {', '.join(unknown)}; known: {known}.")
    try:
        return model.model_validate(args)
    except ValidationError as error:
        raise ToolArgumentError(_sentence(model, error)) from None


def _sentence(model: type[ToolArgs], error: ValidationError) -> str:
    first = error.errors(include_url=False)[0]
    key = ".".join(str(part) for part in first["loc"]) or "arguments"
    kind = first["type"]
    if kind == _SENTENCE:
        return str(first["msg"])
    if kind == "missing":
        return f"{key} is required."
    if kind in ("bool_type", "bool_parsing"):
        return f"{key} must be true or false."
    bounds = _bounds(model, first["loc"])
    if kind in ("int_type", "int_parsing", "int_from_float") and bounds:
        return f"{key} must be an integer between {bounds[0]} and {bounds[1]}."
    if kind in ("greater_than_equal", "less_than_equal") and bounds:
        return f"{key} must be between {bounds[0]} and {bounds[1]}, got {first['input']}."
    if kind == "extra_forbidden":
        return f"unknown argument {key}."
    return f"{key}: {first['msg']}."


def _bounds(model: type[ToolArgs], loc: tuple[int | str, ...]) -> tuple[int, int] | None:
    schema = schema_of(model)
    for part in loc:
        schema = schema.get("properties", {}).get(str(part), {})
    if "minimum" in schema and "maximum" in schema:
        return int(schema["minimum"]), int(schema["maximum"])
    return None


# --- the declaration ----------------------------------------------------------------------


def declare(
    name: str,
    kind: ToolKind,
    description: str,
    args: type[Args],
    handler: Callable[[Args, ToolContext], Awaitable[ToolResult]],
    *,
    scope: ToolScope = ToolScope.NAMESPACED,
    kinds: tuple[str, ...] = (),
    target: Callable[[dict[str, Any], ToolContext], str | None] | None = None,
) -> Tool:
    """A tool, declared once: the schema offered and the validation both come from `args`;
    `handler` receives the validated model; `target` overrides where a call lands."""

    async def run(raw: dict[str, Any], context: ToolContext) -> ToolResult:
        return await handler(parse_args(args, raw), context)

    return Tool(
        name=name,
        kind=kind,
        description=description,
        parameters=schema_of(args),
        handler=run,
        scope=scope,
        resource_kinds=kinds,
        target=target,
    )


def declare_write(
    name: str,
    description: str,
    operation: DeclaredWrite,
    *,
    scope: ToolScope = ToolScope.NAMESPACED,
    kinds: tuple[str, ...] = (),
) -> Tool:
    """A write tool, declared once: its schema comes from the operation's argument model,
    which its `prepare` validates against; only the approval flow runs it (`tool.write`)."""
    return Tool(
        name=name,
        kind=ToolKind.WRITE,
        description=description,
        parameters=_with_reason(schema_of(operation.args_model)),
        handler=_approval_only,
        scope=scope,
        resource_kinds=kinds,
        write=operation,
    )


class StatedReason(ToolArgs):
    """What every write asks beside its own arguments: the approval card shows the model's
    stated reason next to the preview (the pipeline takes it out before `prepare`)."""

    reason: Annotated[str, Field(description="One sentence for the approver: why this change.")]


def _with_reason(schema: dict[str, Any]) -> dict[str, Any]:
    reason = schema_of(StatedReason)
    return {
        **schema,
        "properties": {**schema.get("properties", {}), **reason["properties"]},
        "required": [*schema.get("required", []), *reason["required"]],
    }


async def _approval_only(args: dict[str, Any], context: ToolContext) -> ToolResult:
    raise ToolFailure("write tools run only through an approval")
