"""Field ownership for the fake Kubernetes API (tests/peers/kube_server.py): `managedFields`
per field manager, as a v1.20 kube-apiserver keeps them, for the fields kelpie's writes and a
server-side applier touch (`metadata.labels`, `metadata.annotations`, `spec`).

- Every PATCH (strategic, merge, JSON patch) is an `Update` by its manager (`?fieldManager=`,
  else the User-Agent up to its first `/`, e.g. "OpenAPI-Generator" for the Python client):
  it takes the fields whose value it changed away from every other manager.
- A server-side apply (`application/apply-patch+yaml`) claims exactly the fields it sends.
  One another manager owns (itself, or the map or list item holding it) with a different
  value is a 409 Conflict naming that manager and the field, unless `?force=true`, which
  takes the field over (the holder keeps the map). The same value is shared ownership.
- The scale subresource changes `spec.replicas` without touching managedFields (v1.20 does
  not track it; v1.21 does).

Checked against a real API server by tests/test_kube_backends.py (same requests, same codes,
messages and owners). Not modelled: status fields, an apply that creates the object or drops
fields its manager no longer sends, and lists keyed by anything but `name`. An object seeded
without managedFields counts as created by "OpenAPI-Generator" (as the real tier's seeding
through the Python client is).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

Obj = dict[str, Any]
FieldPath = tuple[str, ...]  # FieldsV1 keys: ("f:spec", "f:replicas"), 'k:{"name":"app"}'
SEED_MANAGER = "OpenAPI-Generator"
_TRACKED_METADATA = ("labels", "annotations")
# The map-typed fields (map[string]string) among those kelpie and an applier touch.
_MAPS = frozenset({"labels", "annotations", "matchLabels", "nodeSelector"})


@dataclass(frozen=True)
class Conflict:
    manager: str  # as the real server prints it: `"kelpie" using apps/v1` or `"gitops"`
    path: str  # `.spec.template.spec.containers[name="app"].image`


class ApplyConflicts(Exception):
    def __init__(self, conflicts: list[Conflict]) -> None:
        super().__init__(conflicts)
        self.conflicts = conflicts

    @property
    def message(self) -> str:
        """The real server's Status message (apiserver fieldmanager/internal/conflict.go)."""
        if len(self.conflicts) == 1:
            only = self.conflicts[0]
            return f"Apply failed with 1 conflict: conflict with {only.manager}: {only.path}"
        lines: list[str] = []
        for manager in sorted({c.manager for c in self.conflicts}):
            lines.append(f"conflicts with {manager}:")
            lines += [f"- {c.path}" for c in self.conflicts if c.manager == manager]
        return f"Apply failed with {len(self.conflicts)} conflicts: " + "\n".join(lines)

    @property
    def causes(self) -> list[Obj]:
        return [
            {"reason": "FieldManagerConflict", "message": f"conflict with {c.manager}"}
            | {"field": c.path}
            for c in self.conflicts
        ]


def tracked(obj: Obj) -> Obj:
    """The part of an object whose ownership is modelled."""
    meta = obj.get("metadata") or {}
    kept: Obj = {}
    if tracked_meta := {k: meta[k] for k in _TRACKED_METADATA if k in meta}:
        kept["metadata"] = tracked_meta
    if "spec" in obj:
        kept["spec"] = obj["spec"]
    return kept


def field_paths(value: Any, prefix: FieldPath = ()) -> set[FieldPath]:
    """Every field a value sets: maps recurse, items of lists of named objects are keyed by
    name (and are members themselves), anything else is a leaf."""
    paths: set[FieldPath] = set()
    for key, item in (value or {}).items():
        path = (*prefix, f"f:{key}")
        if isinstance(item, dict) and item:
            if key in _MAPS:  # a map (not a struct) is a member itself: "." in FieldsV1
                paths.add(path)
            paths |= field_paths(item, path)
        elif _named_items(item):
            for element in item:
                keyed = (*path, "k:" + json.dumps({"name": element["name"]}, separators=(",", ":")))
                paths.add(keyed)
                paths |= field_paths(element, keyed)
        else:
            paths.add(path)
    return paths


def value_at(obj: Any, path: FieldPath) -> Any:
    """The value at a field path (None where there is none)."""
    here = obj
    for key in path:
        if key.startswith("f:") and isinstance(here, dict):
            here = here.get(key[2:])
        elif key.startswith("k:") and isinstance(here, list):
            name = json.loads(key[2:])["name"]
            here = next((i for i in here if isinstance(i, dict) and i.get("name") == name), None)
        else:
            return None
    return here


def _leaf(obj: Any, path: FieldPath) -> bool:
    """Whether the field is a value of its own, not a list item or map holding fields."""
    value = value_at(obj, path)
    return not path[-1].startswith("k:") and not (isinstance(value, dict) and value)


def _named_items(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(i, dict) and "name" in i for i in value)
    )


def path_text(path: FieldPath) -> str:
    parts = []
    for key in path:
        if key.startswith("k:"):
            ((name, value),) = json.loads(key[2:]).items()
            parts.append(f"[{name}={json.dumps(value)}]")
        else:
            parts.append("." + key[2:])
    return "".join(parts)


def to_fields_v1(paths: set[FieldPath]) -> Obj:
    tree: Obj = {}
    for path in sorted(paths):
        node = tree
        for key in path:
            node = node.setdefault(key, {})
    for path in paths:  # a member with fields of its own (list item, map) is marked by "."
        node = tree
        for key in path:
            node = node[key]
        if node:
            node["."] = {}
    return tree


def from_fields_v1(tree: Obj, prefix: FieldPath = ()) -> set[FieldPath]:
    paths: set[FieldPath] = set()
    for key, sub in tree.items():
        if key == ".":
            paths.add(prefix)
        elif sub:
            paths |= from_fields_v1(sub, (*prefix, key))
        else:
            paths.add((*prefix, key))
    return paths


@dataclass
class _Entry:
    manager: str
    operation: str  # Update | Apply
    api_version: str
    paths: set[FieldPath]
    time: str

    def same_manager(self, other: _Entry) -> bool:
        # Appliers are one manager whatever API version they used; updaters are not.
        if self.operation == "Apply" == other.operation:
            return self.manager == other.manager
        return (self.manager, self.operation, self.api_version) == (
            other.manager,
            other.operation,
            other.api_version,
        )

    @property
    def printed(self) -> str:
        if self.operation == "Update":
            return f"{json.dumps(self.manager)} using {self.api_version}"
        return json.dumps(self.manager)

    def wire(self) -> Obj:
        return {
            "manager": self.manager,
            "operation": self.operation,
            "apiVersion": self.api_version,
            "time": self.time,
            "fieldsType": "FieldsV1",
            "fieldsV1": to_fields_v1(self.paths),
        }


class FieldOwners:
    """The managedFields of one object, before and after one write."""

    def __init__(self, current: Obj, api_version: str) -> None:
        self._api_version = api_version
        stored = (current.get("metadata") or {}).get("managedFields")
        if stored is None:
            seeded = field_paths(tracked(current))
            stored = [_Entry(SEED_MANAGER, "Update", api_version, seeded, _now()).wire()]
        self._entries = [
            _Entry(
                e["manager"],
                e["operation"],
                e["apiVersion"],
                from_fields_v1(e.get("fieldsV1") or {}),
                e.get("time", _now()),
            )
            for e in stored
        ]

    def update(self, manager: str, before: Obj, after: Obj) -> list[Obj]:
        """An Update: the manager takes every field whose value it changed."""
        old, new = tracked(before), tracked(after)
        now_set = field_paths(new)
        # A changed leaf, or a member (list item, map) that was not there before.
        changed = {
            p
            for p in now_set
            if value_at(old, p) != value_at(new, p) and (_leaf(new, p) or value_at(old, p) is None)
        }
        gone = field_paths(old) - now_set
        writer = _Entry(manager, "Update", self._api_version, set(), _now())
        return self._settle(writer, changed, changed | gone)

    def apply(self, manager: str, config: Obj, live: Obj, *, force: bool) -> list[Obj]:
        """An Apply of `config` onto `live`; raises ApplyConflicts unless forced."""
        sent = tracked(config)
        claimed = field_paths(sent)
        applier = _Entry(manager, "Apply", self._api_version, set(), _now())
        conflicts: list[tuple[_Entry, FieldPath]] = []
        for entry in self._entries:
            if entry.same_manager(applier):
                continue
            for path in sorted(claimed):
                # Owning the field, or a member above it (a map, a list item), conflicts when
                # the value would change; the real server reports it at the field's path.
                owned = any(path[:depth] in entry.paths for depth in range(1, len(path) + 1))
                changes = value_at(sent, path) != value_at(tracked(live), path)
                if owned and changes and _leaf(sent, path):
                    conflicts.append((entry, path))
        if conflicts and not force:
            raise ApplyConflicts([Conflict(e.printed, path_text(p)) for e, p in conflicts])
        taken = {p for _, p in conflicts}
        for entry in self._entries:  # an applier's set is what it sent this time
            if entry.same_manager(applier):
                entry.paths = set()
        return self._settle(applier, claimed, taken)

    def _settle(self, writer: _Entry, owned: set[FieldPath], taken: set[FieldPath]) -> list[Obj]:
        for entry in self._entries:
            if entry.same_manager(writer):
                entry.paths |= owned
                entry.time = writer.time
                break
        else:
            writer.paths = set(owned)
            self._entries.append(writer)
        for entry in self._entries:
            if not entry.same_manager(writer):
                entry.paths -= taken
        return [e.wire() for e in self._entries if e.paths]


def manager_of(query_manager: str | None, user_agent: str) -> str:
    """`?fieldManager=`, else the User-Agent up to its first `/` (the real server's default)."""
    return query_manager or user_agent.split("/")[0][:128]


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
