"""The execution firewall: deny zones that hold whatever the channel's role allows.

It owns three zones from `FirewallConfig`: namespaces (globs), kinds (case-insensitive,
Secret by default) and `namespace/name` globs, and the indirect ways a call could reach
them: a call spanning all namespaces, an argument naming a kind, a field or label
selector on `metadata.namespace`. It does not know roles (that is the role gate) and it
cannot filter what a permitted call returns.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from fnmatch import fnmatchcase
from typing import Any

from bot.config import FirewallConfig
from bot.pipeline.decision import ToolInvocation
from bot.toolsets.spec import ToolScope
from bot.values import Decision

# Arguments whose value names a Kubernetes kind or resource (e.g. a generic get tool, or
# events filtered by the object they are about).
_KIND_ARGS = (
    "kind",
    "kinds",
    "resource",
    "resources",
    "resource_kind",
    "object_kind",
    "involved_object_kind",
)
# Arguments whose value names one object.
_NAME_ARGS = ("name", "pod", "deployment", "node", "service", "involved_object_name")
_SELECTOR_ARGS = ("field_selector", "label_selector")
_GLOB_CHARS = re.compile(r"[*?\[\]]")
# One selector requirement: `key=value`, `key==value`, `key!=value`, `key in (a, b)`.
# Matched whole (fullmatch), like every name pattern here.
_EQUALITY = re.compile(r"\s*([\w./-]+)\s*(==|=|!=)\s*([^\s]*)\s*")
_SET = re.compile(r"\s*([\w./-]+)\s+(in|notin)\s*\(([^)]*)\)\s*", re.IGNORECASE)


class FirewallStage:
    name = "firewall"

    def __init__(self, config: FirewallConfig) -> None:
        self._namespaces = list(config.deny_namespaces)
        # (kind, group or None) lower-cased for matching, as written in the config for
        # reasons: `Secret` denies that kind in any group, `Gadget.example.com` in one.
        self._kinds = {_kind_parts(kind): kind for kind in config.deny_kinds}
        self._names = [_split_name_glob(pattern) for pattern in config.deny_names]

    async def check(self, call: ToolInvocation) -> Decision:
        for check in (self._namespace, self._kind, self._object_name, self._selectors):
            reason = check(call)
            if reason is not None:
                return Decision.deny(reason)
        return Decision.allow()

    def _denied_namespace(self, namespace: str) -> str | None:
        for pattern in self._namespaces:
            if namespace and fnmatchcase(namespace, pattern):
                return pattern
        return None

    def _namespace(self, call: ToolInvocation) -> str | None:
        if call.tool.scope is ToolScope.QUERY:
            return None  # the tool puts the denied namespaces into its query (observe/scope.py)
        namespace = call.namespace
        tool = call.tool.name
        if namespace is None:
            if self._namespaces:
                noun = "namespace" if len(self._namespaces) == 1 else "namespaces"
                zones = ", ".join(self._namespaces)
                return (
                    f"{tool} across all namespaces would reach the denied {noun} {zones}; "
                    "name a namespace"
                )
            return None
        if self._namespaces and _GLOB_CHARS.search(namespace):
            return f"{tool} must name one namespace, not the pattern {namespace}"
        zone = self._denied_namespace(namespace)
        if zone is not None:
            return f"namespace {namespace} is a denied zone ({zone}) for every channel"
        # A call on Namespace objects names the namespace as the object.
        if any(kind.lower() == "namespace" for kind in call.tool.resource_kinds):
            for value in _name_values(call.args):
                zone = self._denied_namespace(value)
                if zone is not None:
                    return f"namespace {value} is a denied zone ({zone}) for every channel"
        return None

    def _kind(self, call: ToolInvocation) -> str | None:
        if not self._kinds:
            return None
        for kind in call.tool.resource_kinds:
            if self._denied_kind(kind) is not None:
                return f"{call.tool.name} touches {kind} objects, a denied kind for every channel"
        for key in _KIND_ARGS:
            for value in _strings(call.args.get(key)):
                named = self._named_kind(value)
                if named is not None:
                    return f"{key}={value} names {named} objects, a denied kind for every channel"
        return None

    def _denied_kind(self, kind: str) -> str | None:
        """The deny entry a touched kind falls under: `Deployment` (a typed tool's, group
        unsaid) or `Gadget.example.com` (a resolved one), matched by kind and, where both
        say it, by group."""
        name, group = _kind_parts(kind)
        for (denied, denied_group), written in self._kinds.items():
            if name == denied and (None in (group, denied_group) or group == denied_group):
                return written
        return None

    def _named_kind(self, value: str) -> str | None:
        """`Secret`, `secrets`, `v1/Secret`, `secrets/db`, `secrets.v1.` all name Secret;
        `gadgets.example.com` and `example.com/v1/Gadget` name Gadget.example.com."""
        lowered_value = value.lower()
        for token in re.split(r"[\s/,]+", lowered_value):
            candidates = {token, token.split(".", 1)[0]}
            for candidate in candidates:
                for (lowered, group), kind in self._kinds.items():
                    if candidate not in (lowered, lowered + "s", lowered + "es"):
                        continue
                    if group is None or group in lowered_value:
                        return kind
        return None

    def _object_name(self, call: ToolInvocation) -> str | None:
        if not self._names:
            return None
        namespace = call.namespace
        names = list(_name_values(call.args))
        for pattern, ns_glob, name_glob in self._names:
            if namespace is None:
                # The namespace is unknown: any zone whose name part fits is reachable.
                if any(fnmatchcase(name, name_glob) for name in names):
                    return (
                        f"{call.tool.name} across all namespaces could reach the denied "
                        f"object zone {pattern}; name a namespace"
                    )
                continue
            if not fnmatchcase(namespace, ns_glob):
                continue
            for name in names:
                if fnmatchcase(name, name_glob):
                    return f"{namespace}/{name} is in the denied object zone {pattern}"
            if not names and name_glob == "*":
                return f"namespace {namespace} is in the denied object zone {pattern}"
        return None

    def _selectors(self, call: ToolInvocation) -> str | None:
        for arg in _SELECTOR_ARGS:
            selector = call.args.get(arg)
            if not isinstance(selector, str):
                continue
            for key, values in _requirements(selector):
                lowered = key.lower()
                if lowered.endswith("namespace"):
                    for value in values:
                        zone = self._denied_namespace(value)
                        if zone is not None:
                            return f"{arg} {key}={value} would reach the denied namespace {zone}"
                elif lowered.endswith("kind"):
                    for value in values:
                        kind = self._named_kind(value)
                        if kind is not None:
                            return f"{arg} {key}={value} names {kind} objects, a denied kind"
        return None


def _kind_parts(kind: str) -> tuple[str, str | None]:
    """`Gadget.example.com` → ("gadget", "example.com"); `Secret` → ("secret", None)."""
    name, dot, group = kind.lower().partition(".")
    return name, group if dot else None


def _split_name_glob(pattern: str) -> tuple[str, str, str]:
    namespace, slash, name = pattern.partition("/")
    if not slash:
        # A bare name glob applies in every namespace.
        return pattern, "*", pattern
    return pattern, namespace, name


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, list | tuple):
        for item in value:
            if isinstance(item, str):
                yield item


def _name_values(args: dict[str, Any]) -> Iterator[str]:
    for key in _NAME_ARGS:
        for value in _strings(args.get(key)):
            if value:
                yield value


def _requirements(selector: str) -> Iterator[tuple[str, list[str]]]:
    """Positive requirements only (`=`, `==`, `in`): `!=`/`notin` narrow, never widen,
    a call that already names its namespace."""
    for term in re.split(r",(?![^(]*\))", selector):
        equality = _EQUALITY.fullmatch(term)
        if equality is not None:
            key, operator, value = equality.groups()
            if operator != "!=":
                yield key, [value]
            continue
        in_set = _SET.fullmatch(term)
        if in_set is not None:
            key, operator, values = in_set.groups()
            if operator.lower() == "in":
                yield key, [v.strip() for v in values.split(",") if v.strip()]
