"""The replay server: one case's recorded fixture served as a read-only Kubernetes API (and,
where the case has them, Prometheus and Loki HTTP APIs) on 127.0.0.1, an ephemeral port.

Kubernetes: discovery (`/api`, `/apis`, each group version), list and get of namespaced and
cluster kinds (label and field selectors), the `scale` subresource and pod logs. Writes
(POST, PUT, PATCH, DELETE; dry runs and real ones alike) are recorded and answered as the
real server would answer them (the patched object, the deleted object) but never applied:
the next read still shows the fixture. SelfSubjectAccessReviews answer allowed.

Prometheus (under `/prometheus`) and Loki (under `/loki`) answer from recorded series and
streams: a query is not evaluated; every series (or stream) whose labels satisfy the
query's label matchers (after kelpie scoped it) is returned as recorded. A case without
them answers 503, like an unreachable backend.

What it deliberately lacks: watch, authentication, PromQL/LogQL evaluation, controllers.
"""

from __future__ import annotations

import copy
import json
import re
import socket
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiohttp import web

from bot.eval.apiserver import field_matcher, label_matcher, merge_patch
from bot.eval.case import Fixture

Obj = dict[str, Any]
WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
SSAR = "selfsubjectaccessreviews"


@dataclass(frozen=True)
class Kind:
    plural: str
    kind: str
    api_version: str  # "v1" or "group/version"
    namespaced: bool

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    def not_found(self, name: str, subresource: str | None = None) -> web.Response:
        """The real server's 404: `deployments.apps "web" not found`, `pods "x" not found`."""
        resource = f"{self.plural}/{subresource}" if subresource else self.plural
        qualified = f"{resource}.{self.group}" if self.group else resource
        return _status(404, "NotFound", f'{qualified} "{name}" not found')


_BUILTIN = (
    Kind("namespaces", "Namespace", "v1", False),
    Kind("nodes", "Node", "v1", False),
    Kind("persistentvolumes", "PersistentVolume", "v1", False),
    Kind("pods", "Pod", "v1", True),
    Kind("services", "Service", "v1", True),
    Kind("endpoints", "Endpoints", "v1", True),
    Kind("events", "Event", "v1", True),
    Kind("configmaps", "ConfigMap", "v1", True),
    Kind("secrets", "Secret", "v1", True),
    Kind("persistentvolumeclaims", "PersistentVolumeClaim", "v1", True),
    Kind("serviceaccounts", "ServiceAccount", "v1", True),
    Kind("deployments", "Deployment", "apps/v1", True),
    Kind("replicasets", "ReplicaSet", "apps/v1", True),
    Kind("statefulsets", "StatefulSet", "apps/v1", True),
    Kind("daemonsets", "DaemonSet", "apps/v1", True),
    Kind("controllerrevisions", "ControllerRevision", "apps/v1", True),
    Kind("jobs", "Job", "batch/v1", True),
    Kind("cronjobs", "CronJob", "batch/v1", True),
    Kind("ingresses", "Ingress", "networking.k8s.io/v1", True),
    Kind("networkpolicies", "NetworkPolicy", "networking.k8s.io/v1", True),
    Kind("horizontalpodautoscalers", "HorizontalPodAutoscaler", "autoscaling/v2", True),
    Kind("poddisruptionbudgets", "PodDisruptionBudget", "policy/v1", True),
)
_SUBRESOURCES = {"pods": ("log", "status"), "deployments": ("scale", "status")}


@dataclass(frozen=True)
class RecordedWrite:
    method: str
    path: str
    dry_run: bool
    body: Any


# --- the server ---------------------------------------------------------------------------


def _status(code: int, reason: str, message: str) -> web.Response:
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    return web.json_response(body, status=code)


@dataclass
class Served:
    """The fixture of the case being run, with server-owned metadata filled in."""

    kinds: dict[tuple[str, str], Kind] = field(default_factory=dict)  # (api_version, plural)
    objects: dict[str, list[Obj]] = field(default_factory=dict)  # plural -> objects
    fixture: Fixture = field(default_factory=Fixture)
    now: datetime = field(default_factory=lambda: datetime.now(UTC))


class ReplayServer:
    """Serves one case's fixture at a time (`load`); records every write it is sent."""

    def __init__(self) -> None:
        self._served = Served()
        self.writes: list[RecordedWrite] = []
        self._runner: web.AppRunner | None = None
        self._port: int | None = None

    # --- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/prometheus/{tail:.*}", self._prometheus)
        app.router.add_route("*", "/loki/{tail:.*}", self._loki)
        app.router.add_route("*", "/{tail:.*}", self._kube)
        self._runner = web.AppRunner(app, shutdown_timeout=0.1, access_log=None)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        self._port = sock.getsockname()[1]
        await web.SockSite(self._runner, sock).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @property
    def url(self) -> str:
        if self._port is None:
            raise RuntimeError("start() the replay server first")
        return f"http://127.0.0.1:{self._port}"

    @property
    def prometheus_url(self) -> str:
        return f"{self.url}/prometheus"

    @property
    def loki_url(self) -> str:
        return f"{self.url}/loki"

    def write_kubeconfig(self, path: Path, clusters: list[str]) -> Path:
        """A kubeconfig with one context per cluster name, each pointing here."""
        document = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": c, "cluster": {"server": self.url}} for c in clusters],
            "users": [{"name": "kelpie-eval", "user": {"token": "replay"}}],
            "contexts": [
                {"name": c, "context": {"cluster": c, "user": "kelpie-eval"}} for c in clusters
            ],
            "current-context": clusters[0],
        }
        path.write_text(json.dumps(document, indent=2), encoding="utf-8")
        return path

    def load(self, fixture: Fixture, now: datetime) -> None:
        """Serve this fixture from now on, its relative times resolved against `now`; the
        writes recorded so far are forgotten."""
        served = Served(kinds={(k.api_version, k.plural): k for k in _BUILTIN})
        served.fixture, served.now = fixture, now
        for index, obj in enumerate(fixture.objects_at(now)):
            kind = self._kind_of(served, obj)
            served.objects.setdefault(kind.plural, []).append(_filled(obj, kind, index, now))
        self._served = served
        self.writes = []

    @staticmethod
    def _kind_of(served: Served, obj: Obj) -> Kind:
        for kind in served.kinds.values():
            if kind.kind == obj["kind"] and kind.api_version == obj["apiVersion"]:
                return kind
        namespaced = bool(obj["metadata"].get("namespace"))
        kind = Kind(obj["kind"].lower() + "s", obj["kind"], obj["apiVersion"], namespaced)
        served.kinds[(kind.api_version, kind.plural)] = kind
        return kind

    # --- Kubernetes ---------------------------------------------------------------------

    async def _kube(self, request: web.Request) -> web.StreamResponse:
        parts = [p for p in request.path.split("/") if p]
        if request.method in WRITE_METHODS and SSAR not in parts:
            body = await _body(request)
            dry_run = _dry_run(request.query.getall("dryRun", []), body)
            self.writes.append(RecordedWrite(request.method, request.path_qs, dry_run, body))
            return self._answer_write(request.method, parts, body)
        if request.method == "POST":
            review = await _body(request)
            review["status"] = {"allowed": True}
            return web.json_response(review, status=201)
        if request.method != "GET":
            return _status(405, "MethodNotAllowed", "the server does not allow this method")
        return self._read(parts, request)

    def _read(self, parts: list[str], request: web.Request) -> web.StreamResponse:
        if parts == ["version"]:
            return web.json_response({"major": "1", "minor": "31", "gitVersion": "v1.31.0-replay"})
        if parts == ["api"]:
            return web.json_response({"kind": "APIVersions", "versions": ["v1"]})
        if parts == ["apis"]:
            return web.json_response(self._groups())
        version, rest = _version_of(parts)
        if version is None:
            return _status(404, "NotFound", "the server could not find the requested resource")
        if not rest:
            return web.json_response(self._resources(version))
        return self._resource_read(version, rest, request)

    def _groups(self) -> Obj:
        versions: dict[str, set[str]] = {}
        for kind in self._served.kinds.values():
            if kind.group:
                versions.setdefault(kind.group, set()).add(kind.api_version)
        groups = []
        for group, found in sorted(versions.items()):
            listed: list[dict[str, str]] = [
                {"groupVersion": v, "version": v.partition("/")[2]} for v in sorted(found)
            ]
            groups.append({"name": group, "versions": listed, "preferredVersion": listed[0]})
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}

    def _resources(self, version: str) -> Obj:
        resources = []
        for kind in self._served.kinds.values():
            if kind.api_version != version:
                continue
            verbs = ["get", "list", "patch", "delete", "create", "update"]
            resources.append(
                {
                    "name": kind.plural,
                    "singularName": kind.kind.lower(),
                    "namespaced": kind.namespaced,
                    "kind": kind.kind,
                    "verbs": verbs,
                }
            )
            for sub in _SUBRESOURCES.get(kind.plural, ()):
                resources.append(
                    {
                        "name": f"{kind.plural}/{sub}",
                        "singularName": "",
                        "namespaced": kind.namespaced,
                        "kind": "Scale" if sub == "scale" else kind.kind,
                        "verbs": ["get", "patch"],
                    }
                )
        return {"kind": "APIResourceList", "groupVersion": version, "resources": resources}

    def _locate(self, version: str, rest: list[str]) -> tuple[Kind, str | None, list[str]] | None:
        """(kind, namespace, [name, subresource…]) of a resource path, or None."""
        namespace = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        elif len(rest) == 2 and rest[0] == "namespaces":
            rest = ["namespaces", rest[1]]
        kind = self._served.kinds.get((version, rest[0]))
        if kind is None:
            return None
        return kind, namespace, rest[1:]

    def _resource_read(
        self, version: str, rest: list[str], request: web.Request
    ) -> web.StreamResponse:
        located = self._locate(version, rest)
        if located is None:
            return _status(404, "NotFound", "the server could not find the requested resource")
        kind, namespace, tail = located
        if not tail:
            return self._list(kind, namespace, request)
        obj = self._find(kind, namespace, tail[0])
        if obj is None:
            return kind.not_found(tail[0], tail[1] if len(tail) > 1 and tail[1] != "log" else None)
        if len(tail) == 1:
            return web.json_response(obj)
        if tail[1] == "log" and kind.plural == "pods":
            return self._log(obj, request)
        if tail[1] == "scale" and kind.plural == "deployments":
            return web.json_response(_scale(obj))
        if tail[1] == "status":
            return web.json_response(obj)
        return _status(404, "NotFound", "the server could not find the requested resource")

    def _find(self, kind: Kind, namespace: str | None, name: str) -> Obj | None:
        for obj in self._served.objects.get(kind.plural, []):
            meta = obj["metadata"]
            if meta["name"] == name and (not kind.namespaced or meta.get("namespace") == namespace):
                return copy.deepcopy(obj)
        return None

    def _list(self, kind: Kind, namespace: str | None, request: web.Request) -> web.Response:
        try:
            labels = label_matcher(request.query.get("labelSelector", ""))
            fields = field_matcher(kind.plural, request.query.get("fieldSelector", ""))
        except ValueError as error:
            return _status(400, "BadRequest", str(error))
        items = [
            copy.deepcopy(obj)
            for obj in self._served.objects.get(kind.plural, [])
            if (namespace is None or obj["metadata"].get("namespace") == namespace)
            and labels(obj["metadata"].get("labels") or {})
            and fields(obj)
        ]
        limit = int(request.query.get("limit", "0") or 0)
        if limit > 0:
            items = items[:limit]
        listing = {
            "kind": f"{kind.kind}List",
            "apiVersion": kind.api_version,
            "metadata": {"resourceVersion": "1000"},
            "items": items,
        }
        return web.json_response(listing)

    def _log(self, pod: Obj, request: web.Request) -> web.Response:
        meta = pod["metadata"]
        container = request.query.get("container")
        previous = request.query.get("previous") in ("true", "True", "1")
        for entry in self._served.fixture.logs:
            if (
                entry.namespace == meta.get("namespace")
                and entry.pod == meta["name"]
                and entry.previous == previous
                and (container is None or entry.container in (None, container))
            ):
                return web.Response(text=_tail(entry.text, request.query.get("tailLines")))
        if previous:
            message = (
                f'previous terminated container "{container or "app"}" in pod '
                f'"{meta["name"]}" not found'
            )
            return _status(400, "BadRequest", message)
        return web.Response(text="")

    def _answer_write(self, method: str, parts: list[str], body: Any) -> web.Response:
        version, rest = _version_of(parts)
        located = self._locate(version, rest) if version and rest else None
        if located is None:
            return _status(404, "NotFound", "the server could not find the requested resource")
        kind, namespace, tail = located
        if method == "POST" and not tail:
            return web.json_response(body if isinstance(body, dict) else {}, status=201)
        obj = self._find(kind, namespace, tail[0]) if tail else None
        if obj is None:
            return kind.not_found(tail[0] if tail else "")
        subresource = tail[1] if len(tail) > 1 else None
        if subresource == "eviction":
            return web.json_response({"kind": "Status", "status": "Success"}, status=201)
        if subresource == "scale":
            scale = _scale(obj)
            patched = merge_patch(scale, body, strategic=False) if isinstance(body, dict) else scale
            return web.json_response(patched)
        if method == "DELETE":
            return web.json_response(obj)
        return web.json_response(self._patched(obj, body))

    @staticmethod
    def _patched(obj: Obj, body: Any) -> Obj:
        if not isinstance(body, dict):
            return obj
        patched = merge_patch(obj, body, strategic=True)
        patched["metadata"]["resourceVersion"] = str(
            int(obj["metadata"].get("resourceVersion", "1")) + 1
        )
        return dict(patched)

    # --- Prometheus ---------------------------------------------------------------------

    async def _prometheus(self, request: web.Request) -> web.Response:
        series = self._served.fixture.series
        if series is None:
            return web.Response(status=503, text="no Prometheus in this case")
        params = dict(request.query)
        if request.method == "POST":
            params.update({k: str(v) for k, v in (await request.post()).items()})
        path = request.match_info["tail"]
        if path.endswith("status/buildinfo"):
            return _prom_ok({"version": "2.53.0-replay"})
        matches = _matchers(params.get("query") or params.get("match[]") or "")
        now = self._served.now.timestamp()
        found = [s for s in series if _selects(matches, s.labels)]
        if path.endswith("series"):
            return _prom_ok([s.labels for s in found])
        if path.endswith("query_range"):
            start = _number(params.get("start"), now - 3600)
            end = _number(params.get("end"), now)
            result = [
                {"metric": s.labels, "values": _points(s.samples, now, start, end)} for s in found
            ]
            return _prom_ok({"resultType": "matrix", "result": result})
        at = _number(params.get("time"), now)
        vector = []
        for s in found:
            points = _points(s.samples, now, at - 300, at)
            if points:
                vector.append({"metric": s.labels, "value": points[-1]})
        return _prom_ok({"resultType": "vector", "result": vector})

    # --- Loki ---------------------------------------------------------------------------

    async def _loki(self, request: web.Request) -> web.Response:
        streams = self._served.fixture.streams
        if streams is None:
            return web.Response(status=503, text="no Loki in this case")
        query = request.query.get("query", "")
        now = self._served.now.timestamp()
        start = _loki_time(request.query.get("start"), now - 3600)
        end = _loki_time(request.query.get("end"), now)
        matches = _matchers(query)
        needles = re.findall(r'\|=\s*"((?:[^"\\]|\\.)*)"', query)
        found: list[Obj] = []
        for stream in streams:
            if not _selects(matches, stream.labels):
                continue
            values = [
                [str(int((now + offset) * 1e9)), line]
                for offset, line in stream.lines
                if start <= now + offset <= end and all(n in line for n in needles)
            ]
            values.sort(key=lambda pair: pair[0], reverse=True)
            if values:
                found.append({"stream": stream.labels, "values": values})
        if _is_metric(query):
            step = _number(request.query.get("step"), 60.0) or 60.0
            return self._loki_metric(found, start, end, step)
        limit = int(request.query.get("limit", "100") or 100)
        for stream_value in found:
            stream_value["values"] = stream_value["values"][:limit]
        body = {"status": "success", "data": {"resultType": "streams", "result": found}}
        return web.json_response(body)

    @staticmethod
    def _loki_metric(found: list[Obj], start: float, end: float, step: float) -> web.Response:
        """Lines counted per step: what `count_over_time(...[step])` would answer."""
        result = []
        for stream in found:
            counts: dict[float, int] = {}
            for stamp, _ in stream["values"]:
                bucket = start + step * ((int(stamp) / 1e9 - start) // step)
                counts[bucket] = counts.get(bucket, 0) + 1
            values = [[t, str(n)] for t, n in sorted(counts.items())]
            result.append({"metric": stream["stream"], "values": values})
        body = {"status": "success", "data": {"resultType": "matrix", "result": result}}
        return web.json_response(body)


def _version_of(parts: list[str]) -> tuple[str | None, list[str]]:
    if len(parts) >= 2 and parts[0] == "api":
        return parts[1], parts[2:]
    if len(parts) >= 3 and parts[0] == "apis":
        return f"{parts[1]}/{parts[2]}", parts[3:]
    return None, []


async def _body(request: web.Request) -> Any:
    raw = await request.read()
    if not raw:
        return {}
    try:
        return json.loads(raw)
    except ValueError:
        return {"raw": raw.decode("utf-8", errors="replace")}


def _dry_run(query: list[str], body: Any) -> bool:
    """`?dryRun=All`, or `dryRun: [All]` in a DeleteOptions body."""
    in_body = body.get("dryRun") if isinstance(body, dict) else None
    return "All" in query or (isinstance(in_body, list) and "All" in in_body)


def _uid(kind: str, namespace: str, name: str) -> str:
    """A fixture object's uid, stable across runs (owner references name their owner's)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"{kind}/{namespace}/{name}"))


def _filled(obj: Obj, kind: Kind, index: int, now: datetime) -> Obj:
    filled = copy.deepcopy(obj)
    meta = filled["metadata"]
    meta.setdefault("uid", _uid(kind.kind, meta.get("namespace", ""), meta["name"]))
    for owner in meta.get("ownerReferences") or []:
        owner.setdefault("uid", _uid(owner["kind"], meta.get("namespace", ""), owner["name"]))
    meta.setdefault("resourceVersion", str(100 + index))
    meta.setdefault("creationTimestamp", now.strftime("%Y-%m-%dT%H:%M:%SZ"))
    if not kind.namespaced:
        meta.pop("namespace", None)
    return filled


_SCALE_META = ("name", "namespace", "uid", "resourceVersion")


def _scale(deployment: Obj) -> Obj:
    meta = deployment["metadata"]
    status = deployment.get("status") or {}
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {k: meta[k] for k in _SCALE_META if k in meta},
        "spec": {"replicas": (deployment.get("spec") or {}).get("replicas", 1)},
        "status": {"replicas": status.get("replicas", 0)},
    }


def _tail(text: str, tail_lines: str | None) -> str:
    if not tail_lines:
        return text
    lines = text.splitlines(keepends=True)
    return "".join(lines[-int(tail_lines) :])


_MATCHER = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"')
_METRIC = re.compile(r"(?<![\w:\"])([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{")
_LOKI_FUNCTIONS = ("count_over_time", "rate(", "bytes_over_time", "sum(", "sum by", "topk")


def _matchers(query: str) -> list[tuple[str, str, str]]:
    found = [(name, op, value.replace('\\"', '"')) for name, op, value in _MATCHER.findall(query)]
    names = [m for m in _METRIC.findall(query) if m not in {"by", "without", "on", "ignoring"}]
    bare = re.fullmatch(r"\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*", query)
    if bare:
        names.append(bare.group(1))
    found += [("__name__", "=", name) for name in names[:1]]
    return found


def _selects(matchers: list[tuple[str, str, str]], labels: dict[str, str]) -> bool:
    for name, op, value in matchers:
        have = labels.get(name, "")
        if op == "=" and have != value:
            return False
        if op == "!=" and have == value:
            return False
        if op == "=~" and not re.fullmatch(value, have):
            return False
        if op == "!~" and re.fullmatch(value, have):
            return False
    return True


def _points(
    samples: tuple[tuple[float, float], ...], now: float, start: float, end: float
) -> list[list[Any]]:
    return [[now + t, repr(v)] for t, v in samples if start <= now + t <= end]


def _prom_ok(data: Any) -> web.Response:
    return web.json_response({"status": "success", "data": data})


def _number(value: str | None, default: float) -> float:
    try:
        return float(value) if value else default
    except ValueError:
        return default


def _loki_time(value: str | None, default: float) -> float:
    number = _number(value, default)
    return number / 1e9 if number > 1e12 else number


def _is_metric(query: str) -> bool:
    return query.lstrip().startswith(_LOKI_FUNCTIONS)
