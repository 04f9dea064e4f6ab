"""`kelpie eval export --thread LINK`: a thread kelpie answered → a case folder skeleton in
the suite's format (`case.yaml` + `fixture/`) for a person to complete.

What comes from the store: the thread's first question and the answer kelpie gave it, the
channel's role (its config body), cluster and namespace, every read call of the thread and
its rendered result, and the thread's feedback (👍/👎 and reasons). What comes from the
cluster: the objects and logs those calls read (`fixture`), since what the tools saw then
was stored only as rendered text: for a 👎'd turn, as re-read when the 👎 came
(`feedback.capture`); for any other turn, re-read now. `case.yaml` says which. Everything
written is masked again here, whatever the store holds. `expect` is left for a person.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from bot.config import Config, RoleConfig
from bot.errors import ExportError
from bot.feedback.fixture import Fixture, relative_times
from bot.feedback.links import ThreadRef
from bot.feedback.thread import Call, read_fixture, role_of, thread_calls
from bot.model.outbound import mask_text
from bot.store.feedback import FeedbackRepository, ThreadRecord
from bot.store.tables import MessageRow, aware
from bot.toolsets.kube.client import KubeClients

_CONTEXT = "\n\n[context] "


@dataclass(frozen=True)
class ExportedCase:
    path: Path
    objects: int
    logs: int
    missing: tuple[str, ...]


@dataclass(frozen=True)
class Conversation:
    """What the export reads of a stored thread (question and answer masked)."""

    question: str
    answer: str
    asked_at: datetime
    calls: list[Call]


class ThreadExport:
    def __init__(
        self,
        store: FeedbackRepository,
        config: Config,
        kube: KubeClients,
        now: Callable[[], datetime],
    ) -> None:
        self._store = store
        self._config = config
        self._kube = kube
        self._now = now

    async def export(self, ref: ThreadRef, out: Path) -> ExportedCase:
        record = await self._store.thread(ref.channel_id, ref.thread_ts)
        if record is None:
            raise ExportError(
                f"kelpie has no conversation in thread {ref.thread_ts} of channel "
                f"{ref.channel_id}; check the link, and that --config names kelpie's database"
            )
        folder = out / case_id(ref)
        if folder.exists():
            raise ExportError(f"{folder} exists already; remove it or pick another --out")
        conversation = read_conversation(record.messages)
        role = role_of(self._config, record.session)
        # A 👎'd turn's reads were captured when the 👎 came; the other turns' are read now.
        captured = {row.turn_id for row in record.fixtures}
        later = [c for c in conversation.calls if c.turn_id not in captured]
        exported_at = self._now()
        fixture = merged(record, await self._reread(record, later), exported_at)
        _name_containers(fixture)
        case = CaseSkeleton(ref, record, conversation, role, fixture, exported_at, bool(later))
        case.write(folder)
        return ExportedCase(folder, len(fixture.objects), len(fixture.logs), tuple(fixture.missing))

    async def _reread(self, record: ThreadRecord, calls: list[Call]) -> Fixture:
        if not calls:
            return Fixture()
        return await read_fixture(self._config, self._kube, record.session, calls)


def merged(record: ThreadRecord, now: Fixture, read_at: datetime) -> Fixture:
    """The captured fixtures (in the order they were captured), then what was read now (at
    `read_at`), times relative to when each was read; an object or log in several keeps its
    first (earliest) copy."""
    fixture = Fixture()
    seen: set[str] = set()
    parts = [
        (
            relative_times(json.loads(r.objects_json), aware(r.captured_at)),
            json.loads(r.logs_json),
            json.loads(r.missing_json),
        )
        for r in record.fixtures
    ]
    latest = (relative_times(now.objects, read_at), now.logs, now.missing)
    for objects, logs, missing in [*parts, latest]:
        for obj in objects:
            meta = obj.get("metadata") or {}
            key = f"{obj.get('kind')}/{meta.get('namespace')}/{meta.get('name')}"
            if key not in seen:
                seen.add(key)
                fixture.objects.append(obj)
        for entry in logs:
            key = f"logs/{entry['namespace']}/{entry['pod']}/{entry['previous']}"
            if key not in seen:
                seen.add(key)
                fixture.logs.append(entry)
        fixture.missing += [line for line in missing if line not in fixture.missing]
    return fixture


def case_id(ref: ThreadRef) -> str:
    return f"slack-{ref.channel_id.lower()}-{ref.thread_ts.replace('.', '-')}"


def read_conversation(messages: list[MessageRow]) -> Conversation:
    """The first question, the answer its turn gave, and every tool call with its result."""
    asked = next((m for m in messages if m.role == "user" and m.slack_user), None)
    if asked is None:
        raise ExportError("the thread holds no question from a person")
    question = (asked.content or "").split(_CONTEXT, 1)[0].strip()
    answers = [
        m for m in messages if m.turn_id == asked.turn_id and m.role == "assistant" and m.content
    ]
    answer = answers[-1].content if answers else ""
    calls = thread_calls(messages)
    return Conversation(_masked(question), _masked(answer or ""), asked.created_at, calls)


def _masked(text: str) -> str:
    return mask_text(text, "export")[0]


def _name_containers(fixture: Fixture) -> None:
    """A log read without a container is the pod's first one: the case format names it."""
    pods = {
        (o["metadata"].get("namespace"), o["metadata"].get("name")): o
        for o in fixture.objects
        if o["kind"] == "Pod"
    }
    for entry in fixture.logs:
        pod = pods.get((entry["namespace"], entry["pod"]))
        containers = (pod or {}).get("spec", {}).get("containers") or [{}]
        entry.setdefault("container", containers[0].get("name", ""))


@dataclass(frozen=True)
class CaseSkeleton:
    ref: ThreadRef
    record: ThreadRecord
    conversation: Conversation
    role: RoleConfig
    fixture: Fixture
    exported_at: datetime
    reread: bool  # some reads were made at export time (not captured at 👎 time)

    def write(self, folder: Path) -> None:
        """All files at once: built in a temporary folder beside it, then renamed."""
        folder.parent.mkdir(parents=True, exist_ok=True)
        building = Path(tempfile.mkdtemp(prefix=".export-", dir=folder.parent))
        try:
            (building / "fixture").mkdir()
            (building / "case.yaml").write_text(self.case_yaml())
            (building / "fixture" / "kube.yaml").write_text(_yaml(self.fixture.objects))
            if self.fixture.logs:
                logs = _yaml({"logs": self.fixture.logs})
                (building / "fixture" / "logs.yaml").write_text(logs)
            (building / "NOTES.md").write_text(self.notes())
            building.rename(folder)
        except BaseException:
            shutil.rmtree(building, ignore_errors=True)
            raise

    def case_yaml(self) -> str:
        session = self.record.session
        body = {
            "id": case_id(self.ref),
            "category": "TODO",
            "question": self.conversation.question,
            "channel": {"cluster": session.cluster, "namespace": session.namespace},
            "role": role_body(self.role),
        }
        return "\n".join(
            [
                *_comment(self.header()),
                _yaml(body).rstrip(),
                *_comment(["The answer kelpie gave (for the person writing `expect`):"]),
                *_comment(self.conversation.answer.splitlines() or ["(no answer)"], "  "),
                EXPECT_TODO,
            ]
        )

    def header(self) -> list[str]:
        session = self.record.session
        lines = [
            f"Exported by `kelpie eval export` at {self.exported_at.isoformat()} from "
            f"{self.ref.link} (channel {session.channel_id}, role {session.role}).",
            "Complete every TODO (category, expect) before adding it to a suite.",
            *self.sources(),
            "Times in fixture/ are relative to when they were read (now-<N>s), so a replay "
            "keeps the ages the objects had then. Compare fixture/ with the tool results in "
            "NOTES.md and edit it back to the incident where they differ. Secrets are never "
            "exported; ConfigMap values and anything that looks like a secret are masked.",
        ]
        for row in self.record.feedback:
            reason = f": {_masked(row.reason)}" if row.reason else ""
            lines.append(f"Feedback: {row.value} by {row.slack_user} on turn {row.turn_id}{reason}")
        return lines

    def sources(self) -> list[str]:
        """Where fixture/ comes from: never what the tools saw (stored only as text)."""
        cluster = self.record.session.cluster
        lines = [
            f"fixture/: the reads of turn {row.turn_id} were re-read from cluster {cluster} "
            f"when its 👎 came ({aware(row.captured_at).isoformat()})"
            for row in self.record.fixtures
        ]
        if self.reread:
            lines.append(
                f"fixture/: {'the other' if lines else 'all'} reads were RE-READ from cluster "
                f"{cluster} at export time, as the channel's role reads it: the cluster now, "
                "not necessarily what the tools saw when kelpie answered "
                f"({aware(self.conversation.asked_at).isoformat()})."
            )
        return lines

    def notes(self) -> str:
        parts = [f"# {case_id(self.ref)}: what kelpie read in {self.ref.link}\n"]
        for index, call in enumerate(self.conversation.calls, 1):
            shown = _masked(json.dumps(call.args, sort_keys=True))
            result = _masked(call.result)
            parts.append(f"## {index}. `{call.name}` {shown}\n\n```\n{result}\n```\n")
        if self.fixture.missing:
            parts.append("## Not in the fixture\n")
            parts += [f"- {line}" for line in self.fixture.missing]
        return "\n".join(parts) + "\n"


EXPECT_TODO = """\
expect:                 # TODO: what a right answer does (see CASE_FORMAT.md)
  answer: []            # TODO: regexes the final answer must match
  called: []            # TODO: tools that must be called
  not_called: []        # TODO: tools that must not be called
  write: none           # TODO: none | proposed
  secrets: []           # TODO: literals that must appear in no message
  judge: []             # TODO: root-cause facts only an LLM judge checks
"""


def role_body(role: RoleConfig) -> dict[str, Any]:
    """The role's config body (what `roles.<name>` holds), without its defaults."""
    body = role.model_dump(mode="json", exclude_defaults=True)
    return {"tools": list(role.tools), "namespaces": list(role.namespaces)} | body


def _comment(lines: list[str], indent: str = "") -> list[str]:
    """YAML comment lines; a line with line breaks in it (a reason) stays commented too."""
    return [f"# {indent}{part}".rstrip() for line in lines for part in line.splitlines() or [""]]


def _yaml(value: Any) -> str:
    return yaml.safe_dump(value, sort_keys=False, allow_unicode=True, default_flow_style=False)
