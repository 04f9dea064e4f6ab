"""What a cluster serves, from API discovery (`/api`, `/api/v1`, `/apis`,
`/apis/<group>/<version>`), and how a kind the model wrote resolves to one of those
resources.

The model may write a kind (`StatefulSet`), a plural or singular (`statefulsets`), a short
name (`sts`), `plural.group` (`gadgets.example.com`) or `group/version/kind`
(`example.com/v1/Gadget`, `v1/Pod`, `core/v1/Pod`). Each cluster's discovery is cached for
`ttl_s` (an injected clock), so a turn's calls ask once. Secrets are refused from the words
alone, before any request leaves kelpie (`names_secret`).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

from bot.toolsets.kube.client import KubeClient
from bot.toolsets.spec import ToolArgumentError, ToolFailure

DISCOVERY_TTL_S = 300.0
# How old a cache must be before a kind it lacks sends discovery again.
REFRESH_ON_MISS_S = 10.0
_VERSION = re.compile(r"v\d+(?:(?:alpha|beta)\d+)?")
# Words that name the core Secret kind however the model spells it.
_SECRET_WORDS = frozenset({"secret", "secrets"})
_NOT_A_KIND = "kind {!r} is not a kind such as StatefulSet or apps/v1/StatefulSet."
_NOT_SERVED = (
    "Cluster {cluster} serves no kind {kind!r}; name a kind such as StatefulSet, a plural "
    "such as statefulsets, or group/version/Kind."
)
SECRET_REFUSAL = "kelpie never reads Secrets, not even their names; ask a person with access."


@dataclass(frozen=True)
class ApiResource:
    """One resource a cluster serves (subresources such as pods/log left out)."""

    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool
    verbs: tuple[str, ...] = ()
    singular: str = ""
    short_names: tuple[str, ...] = ()

    @property
    def group_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified_kind(self) -> str:
        """How the firewall names it: `Kind` for the core group, else `Kind.group`."""
        return f"{self.kind}.{self.group}" if self.group else self.kind

    @property
    def is_secret(self) -> bool:
        return self.group == "" and self.plural == "secrets"

    def path(self, namespace: str | None, name: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        where = f"/namespaces/{namespace}" if namespace and self.namespaced else ""
        return f"{base}{where}/{self.plural}" + (f"/{name}" if name else "")

    def answers(self, word: str) -> bool:
        word = word.lower()
        return word in (self.kind.lower(), self.plural, self.singular) or word in self.short_names


@dataclass(frozen=True)
class KindQuery:
    """A kind as the model wrote it, split into its parts (None: not given)."""

    name: str
    group: str | None = None
    version: str | None = None

    def __str__(self) -> str:
        return "/".join(p for p in (self.group, self.version, self.name) if p is not None)


def parse_kind(text: str) -> KindQuery:
    """`Kind`, `plural.group`, `v1/Kind`, `group/version/Kind` (`core` is the core group)."""
    parts = [p for p in text.strip().split("/")]
    if parts and parts[0] == "":  # "/v1/secrets"
        parts = parts[1:]
    if not parts or any(not p or not re.fullmatch(r"[A-Za-z0-9.-]+", p) for p in parts):
        raise ToolArgumentError(
            f"kind {text!r} is not a kind such as StatefulSet or apps/v1/StatefulSet."
        )
    if len(parts) == 3:
        group = "" if parts[0].lower() == "core" else parts[0].lower()
        return KindQuery(parts[2], group, parts[1])
    if len(parts) == 2:
        if _VERSION.fullmatch(parts[0]):
            return KindQuery(parts[1], "", parts[0])
        return KindQuery(parts[1], "" if parts[0].lower() == "core" else parts[0].lower())
    if len(parts) == 1:
        name, dot, group = parts[0].partition(".")
        if not dot:
            return KindQuery(name)
        version, dot, rest = group.partition(".")
        if dot and _VERSION.fullmatch(version):  # deployments.v1.apps
            return KindQuery(name, rest.lower(), version)
        return KindQuery(name, "" if group.lower() in ("", "core") else group.lower())
    raise ToolArgumentError(
        f"kind {text!r} is not a kind such as StatefulSet or apps/v1/StatefulSet."
    )


def names_secret(query: KindQuery) -> bool:
    """Whether the words name Secrets (any group: a conservative refusal costs nothing)."""
    return query.name.lower() in _SECRET_WORDS


@dataclass
class _Cached:
    at: float
    resources: list[ApiResource]


class Discovery:
    """Each cluster's served resources, cached for `ttl_s` by the injected `clock`; a kind
    not found in a cache older than `refresh_s` asks again (a CRD installed meanwhile)."""

    def __init__(
        self,
        *,
        ttl_s: float = DISCOVERY_TTL_S,
        refresh_s: float = REFRESH_ON_MISS_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ttl_s = ttl_s
        self._refresh_s = refresh_s
        self._clock = clock
        self._cache: dict[str, _Cached] = {}
        # One discovery at a time per cluster: parallel reads share the first one's answer.
        self._locks: dict[str, asyncio.Lock] = {}

    async def resources(self, kube: KubeClient) -> list[ApiResource]:
        async with self._locks.setdefault(kube.name, asyncio.Lock()):
            cached = self._cache.get(kube.name)
            if cached is not None and self._clock() - cached.at < self._ttl_s:
                return cached.resources
            found = await _discover(kube)
            self._cache[kube.name] = _Cached(self._clock(), found)
            return found

    async def resolve(self, kube: KubeClient, query: KindQuery) -> ApiResource:
        """The one resource `query` names, preferring the core group, then discovery order."""
        found = _first(await self.resources(kube), query)
        cached = self._cache.get(kube.name)
        if found is None and cached is not None and self._clock() - cached.at >= self._refresh_s:
            self._cache.pop(kube.name, None)
            found = _first(await self.resources(kube), query)
        if found is None and query.version is not None and query.group is not None:
            # A version discovery did not list (not the group's preferred one, say).
            found = _first(await _group_version(kube, _gv(query), required=False), query)
        if found is None:
            raise ToolFailure(_NOT_SERVED.format(cluster=kube.name, kind=str(query)))
        return found


def _first(served: list[ApiResource], query: KindQuery) -> ApiResource | None:
    return next((r for r in served if r.answers(query.name) and _fits(r, query)), None)


def _gv(query: KindQuery) -> str:
    return f"{query.group}/{query.version}" if query.group else str(query.version)


def _fits(resource: ApiResource, query: KindQuery) -> bool:
    if query.group is not None and resource.group != query.group:
        return False
    return query.version is None or resource.version == query.version


async def _discover(kube: KubeClient) -> list[ApiResource]:
    core = await kube.get_path("discover the core API", "/api")
    versions = core.get("versions") or ["v1"] if isinstance(core, dict) else ["v1"]
    found = await _group_version(kube, str(versions[0]), required=True)
    groups = await kube.get_path("discover the API groups", "/apis")
    listed = groups.get("groups") or [] if isinstance(groups, dict) else []
    ordered = [gv for g in _by_priority(listed) for gv in _versions_of(g)]
    lists = await asyncio.gather(*(_group_version(kube, gv, required=False) for gv in ordered))
    for resources in lists:
        found += resources
    return found


def _by_priority(groups: list[object]) -> list[dict[str, object]]:
    """The server's order (its group priority), `extensions` last: kubectl prefers
    networking.k8s.io's Ingress too, and RBAC grants that one."""
    valid = [g for g in groups if isinstance(g, dict)]
    return sorted(valid, key=lambda g: g.get("name") == "extensions")


def _versions_of(group: dict[str, object]) -> list[str]:
    """Every served version, the preferred first: an older cluster serves some kinds only
    in a beta version (CronJob in batch/v1beta1 before 1.21)."""
    preferred = group.get("preferredVersion")
    first = preferred.get("groupVersion") if isinstance(preferred, dict) else None
    listed = group.get("versions")
    others = [
        str(v.get("groupVersion"))
        for v in (listed if isinstance(listed, list) else [])
        if isinstance(v, dict) and v.get("groupVersion") != first
    ]
    return ([str(first)] if first else []) + others


async def _group_version(
    kube: KubeClient, group_version: str, *, required: bool
) -> list[ApiResource]:
    """The resources of one group version; an unavailable aggregated API (a metrics server
    that is down) leaves its group out rather than failing every kind."""
    group, _, version = group_version.rpartition("/")
    path = f"/apis/{group_version}" if group else f"/api/{version}"
    try:
        listing = await kube.get_path(f"discover {group_version}", path)
    except ToolFailure:
        if required:
            raise
        return []
    found = []
    for entry in (listing or {}).get("resources") or []:
        if not isinstance(entry, dict) or "/" in str(entry.get("name", "/")):
            continue
        found.append(
            ApiResource(
                group=group,
                version=version,
                plural=str(entry["name"]),
                kind=str(entry.get("kind") or ""),
                namespaced=bool(entry.get("namespaced")),
                verbs=tuple(str(v) for v in entry.get("verbs") or ()),
                singular=str(entry.get("singularName") or ""),
                short_names=tuple(str(s) for s in entry.get("shortNames") or ()),
            )
        )
    return found
