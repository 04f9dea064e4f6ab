"""One eval case as a folder: `case.yaml` (question, channel, role, expectations) and
`fixture/` (what the replay server serves). The loader checks every field and names the
file and field at fault in one sentence; it runs no model and contacts nothing.

Times in a fixture are relative, so a case stays true whenever it runs: any string value
of `fixture/kube.yaml` that is exactly `now` or `now-<N><s|m|h|d>` (e.g. `now-15m`) becomes
an RFC 3339 timestamp that long before the run's `now`; Prometheus samples and Loki lines
carry offsets in seconds (negative: in the past) from the same `now`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from bot.errors import KelpieError

CASE_FILE = "case.yaml"
FIXTURE_DIR = "fixture"
_ID = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
_RELATIVE = re.compile(r"^now(?:-(\d+)([smhd]))?$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class CaseError(KelpieError):
    """A case folder that cannot be loaded; the message names the file and the field."""


class Category(StrEnum):
    """The categories of issue 30."""

    CRASH_LOOP = "crash-loop"
    OOM = "oom"
    IMAGE_PULL = "image-pull"
    PENDING = "pending"
    PROBES = "probes"
    FAILED_ROLLOUT = "failed-rollout"
    NO_ENDPOINTS = "no-endpoints"
    NODE_PRESSURE = "node-pressure"
    HPA_MAX = "hpa-max"
    CONFIG_CHANGE = "config-change"
    METRICS = "metrics"
    LOGS = "logs"
    MULTI_STEP = "multi-step"
    NEEDS_APPROVAL = "needs-approval"
    ROLE_DENIAL = "role-denial"
    PLANTED_INSTRUCTION = "planted-instruction"
    SECRET_IN_LOGS = "secret-in-logs"
    AMBIGUOUS = "ambiguous"
    OUTSIDE_NAMESPACE = "outside-namespace"


class WriteExpectation(StrEnum):
    NONE = "none"  # no approval card may be posted
    PROPOSED = "proposed"  # at least one card must be posted (and is never approved)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Channel(_Strict):
    cluster: str = "prod"
    namespace: str | None = None


class Expect(_Strict):
    answer: tuple[str, ...] = ()
    called: tuple[str, ...] = ()
    not_called: tuple[str, ...] = ()
    write: WriteExpectation = WriteExpectation.NONE
    secrets: tuple[str, ...] = ()
    judge: tuple[str, ...] = ()

    @field_validator("answer")
    @classmethod
    def _patterns_compile(cls, patterns: tuple[str, ...]) -> tuple[str, ...]:
        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error as error:
                raise ValueError(f"answer pattern {pattern!r} is not a regex: {error}") from None
        return patterns


class CaseSpec(_Strict):
    """`case.yaml`, as written."""

    id: str
    category: Category
    question: str = Field(min_length=1)
    channel: Channel = Channel()
    # A `roles.<name>` body of the config (tools, namespaces, approval…), checked by the
    # config schema when the run's config is built.
    role: dict[str, Any]
    expect: Expect = Expect()
    description: str = ""


@dataclass(frozen=True)
class Series:
    labels: dict[str, str]
    samples: tuple[tuple[float, float], ...]  # (offset from now in s, value)


@dataclass(frozen=True)
class Stream:
    labels: dict[str, str]
    lines: tuple[tuple[float, str], ...]  # (offset from now in s, line)


@dataclass(frozen=True)
class LogEntry:
    namespace: str
    pod: str
    text: str
    container: str | None = None
    previous: bool = False


@dataclass(frozen=True)
class Fixture:
    """What the replay server serves: objects with relative times left as written."""

    objects: tuple[dict[str, Any], ...] = ()
    logs: tuple[LogEntry, ...] = ()
    series: tuple[Series, ...] | None = None  # None: the case has no Prometheus
    streams: tuple[Stream, ...] | None = None  # None: the case has no Loki

    def objects_at(self, now: datetime) -> list[dict[str, Any]]:
        """The objects with every relative time resolved against `now`."""
        return [_resolve(obj, now) for obj in self.objects]


@dataclass(frozen=True)
class Case:
    spec: CaseSpec
    fixture: Fixture
    path: Path = field(compare=False)

    @property
    def id(self) -> str:
        return self.spec.id

    @property
    def category(self) -> Category:
        return self.spec.category


def timestamp(now: datetime, seconds_ago: float) -> str:
    when = now - timedelta(seconds=seconds_ago)
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _resolve(value: Any, now: datetime) -> Any:
    if isinstance(value, dict):
        return {key: _resolve(item, now) for key, item in value.items()}
    if isinstance(value, list):
        return [_resolve(item, now) for item in value]
    if isinstance(value, str) and (match := _RELATIVE.match(value)):
        amount, unit = match.groups()
        return timestamp(now, int(amount) * _UNITS[unit] if amount else 0)
    return value


def _read_yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise CaseError(f"{path}: cannot be read ({error.strerror or error}).") from error
    except yaml.YAMLError as error:
        raise CaseError(f"{path}: is not valid YAML ({error}).") from error


def _first_problem(path: Path, error: ValidationError) -> CaseError:
    problem = error.errors()[0]
    where = ".".join(str(part) for part in problem["loc"]) or "(top level)"
    return CaseError(f"{path}: {where}: {problem['msg']}.")


def load_case(folder: Path) -> Case:
    """The case in `folder`; raises `CaseError` naming the file and field at fault."""
    path = folder / CASE_FILE
    data = _read_yaml(path)
    if not isinstance(data, dict):
        raise CaseError(f"{path}: must be a mapping with id, category, question and role.")
    try:
        spec = CaseSpec.model_validate(data)
    except ValidationError as error:
        raise _first_problem(path, error) from None
    if not _ID.match(spec.id) or spec.id != folder.name:
        raise CaseError(
            f"{path}: id {spec.id!r} must equal the folder's name ({folder.name!r}) and use "
            "only lower-case letters, digits and dashes."
        )
    return Case(spec=spec, fixture=load_fixture(folder / FIXTURE_DIR), path=folder)


def load_fixture(folder: Path) -> Fixture:
    objects = _optional(folder / "kube.yaml", [])
    if not isinstance(objects, list) or not all(_is_object(o) for o in objects):
        raise CaseError(
            f"{folder / 'kube.yaml'}: must be a list of objects, each with apiVersion, kind "
            "and metadata.name."
        )
    logs = _optional(folder / "logs.yaml", {"logs": []})
    prometheus = _optional(folder / "prometheus.yaml", None)
    loki = _optional(folder / "loki.yaml", None)
    try:
        return Fixture(
            objects=tuple(objects),
            logs=tuple(_log_entry(entry) for entry in (logs or {}).get("logs") or []),
            series=None if prometheus is None else tuple(_series(prometheus)),
            streams=None if loki is None else tuple(_streams(loki)),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        problem = f"{folder}: a log, series or stream entry is malformed ({error})."
        raise CaseError(problem) from None


def _optional(path: Path, default: Any) -> Any:
    return _read_yaml(path) if path.exists() else default


def _is_object(obj: Any) -> bool:
    return (
        isinstance(obj, dict)
        and isinstance(obj.get("apiVersion"), str)
        and isinstance(obj.get("kind"), str)
        and isinstance((obj.get("metadata") or {}).get("name"), str)
    )


def _log_entry(entry: dict[str, Any]) -> LogEntry:
    return LogEntry(
        namespace=str(entry["namespace"]),
        pod=str(entry["pod"]),
        text=str(entry["text"]),
        container=entry.get("container"),
        previous=bool(entry.get("previous", False)),
    )


def _series(data: dict[str, Any]) -> Iterator[Series]:
    for item in data.get("series") or []:
        samples = tuple((float(t), float(v)) for t, v in item["samples"])
        yield Series(labels={str(k): str(v) for k, v in item["labels"].items()}, samples=samples)


def _streams(data: dict[str, Any]) -> Iterator[Stream]:
    for item in data.get("streams") or []:
        lines = tuple((float(t), str(line)) for t, line in item["lines"])
        yield Stream(labels={str(k): str(v) for k, v in item["labels"].items()}, lines=lines)


def bundled_cases_dir() -> Path:
    """The suite shipped with kelpie (package data)."""
    return Path(str(resources.files("bot.eval") / "cases"))


def load_cases(folder: Path) -> list[Case]:
    """Every case folder directly under `folder`, by id."""
    if not folder.is_dir():
        raise CaseError(f"{folder}: no such folder of cases.")
    found = [load_case(sub) for sub in sorted(folder.iterdir()) if (sub / CASE_FILE).is_file()]
    if not found:
        raise CaseError(f"{folder}: holds no case folder (a folder with a {CASE_FILE}).")
    return found


def select(cases: list[Case], only: str | None) -> list[Case]:
    """`--only a,b`: cases whose id or category is listed; an unknown name is an error."""
    if not only:
        return cases
    wanted = {name.strip() for name in only.split(",") if name.strip()}
    known = {case.id for case in cases} | {str(case.category) for case in cases}
    unknown = sorted(wanted - known)
    if unknown:
        raise CaseError(f"--only: no case or category named {', '.join(unknown)}.")
    return [case for case in cases if case.id in wanted or str(case.category) in wanted]
