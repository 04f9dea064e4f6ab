"""What the Kubernetes API server does with a list's selectors and a patch body, in one
place: the replay server answers by it, and the tests' fake kube server reuses it.

`label_matcher` and `field_matcher` raise ValueError with the real server's message for a
selector it refuses (its 400 BadRequest); `merge_patch` is RFC 7386 merge, with `strategic`
merging lists of named items (containers, env, ports…) by name.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any

Obj = dict[str, Any]

# The field selectors the real server accepts per resource (others answer 400).
_FIELDS_COMMON = {"metadata.name", "metadata.namespace"}
_FIELDS = {
    "pods": {"status.phase", "spec.nodeName", "spec.restartPolicy", "spec.schedulerName"}
    | {"spec.serviceAccountName", "status.podIP", "status.nominatedNodeName"},
    "events": {f"involvedObject.{f}" for f in ("kind", "namespace", "name", "uid")}
    | {"involvedObject.apiVersion", "involvedObject.fieldPath", "reason", "type", "source"}
    | {"reportingComponent"},
    "nodes": {"spec.unschedulable"},
    "namespaces": {"status.phase"},
    "replicasets": {"status.replicas"},
}
_FIELD_ALIASES = {"source": "source.component"}

_LABEL_REQ = re.compile(
    r"^\s*(?P<bang>!)?\s*(?P<key>[A-Za-z0-9][-A-Za-z0-9_./]*)\s*"
    r"(?:(?P<op>==|=|!=)\s*(?P<value>[-A-Za-z0-9_.]*)"
    r"|\s(?P<set_op>in|notin)\s*\((?P<values>[^)]*)\))?\s*$"
)


def _split_outside_parens(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for char in text:
        depth += char == "("
        depth -= char == ")"
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    return [*parts, current]


def _label_requirement(text: str) -> Callable[[dict[str, str]], bool]:
    m = _LABEL_REQ.match(text)
    if m is None or (m["bang"] and (m["op"] or m["set_op"])):
        raise ValueError(f"unable to parse requirement: {text!r}")
    key, value = m["key"], m["value"]
    options = {v.strip() for v in (m["values"] or "").split(",")}
    if m["bang"]:
        return lambda labels: key not in labels
    if m["op"] in ("=", "=="):
        return lambda labels: labels.get(key) == value
    if m["op"] == "!=":
        return lambda labels: labels.get(key) != value
    if m["set_op"] == "in":
        return lambda labels: key in labels and labels[key] in options
    if m["set_op"] == "notin":
        return lambda labels: key not in labels or labels[key] not in options
    return lambda labels: key in labels


def label_matcher(selector: str) -> Callable[[dict[str, str]], bool]:
    """A label selector (`a=b`, `a!=b`, `a in (x,y)`, `a notin (x)`, `a`, `!a`), parsed once."""
    requirements = [
        _label_requirement(text) for text in _split_outside_parens(selector) if text.strip()
    ]
    return lambda labels: all(holds(labels) for holds in requirements)


def _field_value(obj: Obj, path: str) -> str:
    value: Any = obj
    for part in _FIELD_ALIASES.get(path, path).split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def field_matcher(plural: str, selector: str) -> Callable[[Obj], bool]:
    """A field selector over `plural`'s objects; only the fields the real server supports."""
    requirements: list[tuple[str, bool, str]] = []
    for requirement in filter(None, (r.strip() for r in selector.split(","))):
        m = re.fullmatch(r"([A-Za-z.]+)\s*(==|=|!=)\s*(.*)", requirement)
        if m is None:
            raise ValueError(f"invalid field selector: {requirement!r}")
        key, op, expected = m.groups()
        if key not in _FIELDS_COMMON | _FIELDS.get(plural, set()):
            raise ValueError(f'field label not supported: "{key}"')
        requirements.append((key, op != "!=", expected))
    return lambda obj: all(
        (_field_value(obj, key) == expected) == equal for key, equal, expected in requirements
    )


def _named_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(i, dict) and "name" in i for i in value)


def merge_patch(target: Any, patch: Any, *, strategic: bool) -> Any:
    """Apply a JSON merge patch; strategic patches also merge lists of named items by name."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$"):  # strategic directives ($patch, $setElementOrder/...)
            continue
        old: Any = result.get(key)
        if value is None:
            result.pop(key, None)
        elif strategic and _named_list(value) and _named_list(old):
            by_name = {item["name"]: item for item in old}
            for item in value:
                by_name[item["name"]] = merge_patch(by_name.get(item["name"]), item, strategic=True)
            result[key] = list(by_name.values())
        else:
            result[key] = merge_patch(old, value, strategic=strategic)
    return result
