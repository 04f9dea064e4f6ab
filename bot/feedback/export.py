"""`kelpie eval export --thread LINK`: a thread kelpie answered → a case folder skeleton in
the suite's format (`case.yaml` + `fixture/`) for a person to complete.

What comes from the store: the thread's first question and the answer kelpie gave it, the
channel's role (its config body), cluster and namespace, every read call of the thread and
its rendered result, and the thread's feedback (👍/👎 and reasons). What comes from the
cluster: the objects and logs those calls read, re-read now (`fixture`), since what the
tools saw then was stored only as rendered text; `case.yaml` says so. Everything written
is masked again here, whatever the store holds. `expect` is left for a person: TODO.
"""

from __future__ import annotations

import json
import re
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
from bot.feedback.fixture import Fixture, FixtureReader
from bot.feedback.links import ThreadRef
from bot.feedback.reads import plan_reads
from bot.model.outbound import mask_text
from bot.pipeline.roles import ChannelBinding
from bot.store.feedback import FeedbackRepository, ThreadRecord
from bot.store.tables import MessageRow
from bot.toolsets.kube.client import KubeClients
from bot.values import tool_calls_from_json

_CONTEXT = "\n\n[context] "
_EVIDENCE = re.compile(r"\[E\d+\]")


@dataclass(frozen=True)
class ExportedCase:
    path: Path
    objects: int
    logs: int
    missing: tuple[str, ...]


@dataclass(frozen=True)
class Conversation:
    """What the export reads of a stored thread, masked."""

    question: str
    answer: str
    asked_at: datetime
    calls: list[tuple[str, dict[str, Any], str]]  # tool, arguments, rendered result


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
        session = record.session
        folder = out / case_id(ref)
        if folder.exists():
            raise ExportError(f"{folder} exists already; remove it or pick another --out")
        conversation = read_conversation(record.messages)
        role = self._role(session.role)
        binding = ChannelBinding(session.role, role, session.cluster, session.namespace)
        kube = self._kube.client_for(session.cluster).acting_as(binding.tool_context().identity)
        # Only calls that read something (their result holds evidence): not a denied,
        # failed or not-run call, whose objects the agent never saw.
        calls = [(name, args) for name, args, result in conversation.calls if read_ok(result)]
        fixture = await FixtureReader(kube, role.namespaces).read(
            plan_reads(calls, session.namespace)
        )
        fixture.missing += [
            f"{name}: read nothing (denied, failed or not run)"
            for name, _, result in conversation.calls
            if not read_ok(result)
        ]
        _name_containers(fixture)
        case = CaseSkeleton(ref, record, conversation, role, fixture, self._now())
        case.write(folder)
        return ExportedCase(folder, len(fixture.objects), len(fixture.logs), tuple(fixture.missing))

    def _role(self, name: str) -> RoleConfig:
        role = self._config.roles.get(name)
        if role is None:
            raise ExportError(
                f"the thread's role {name!r} is not in this config's roles; export with the "
                "config kelpie ran with"
            )
        return role


def read_ok(result: str) -> bool:
    """A read that succeeded: its result is labelled as evidence (`[E3] …`)."""
    return _EVIDENCE.match(result) is not None


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
    results = {m.tool_call_id: m.content or "" for m in messages if m.role == "tool"}
    calls: list[tuple[str, dict[str, Any], str]] = []
    for message in messages:
        for call in tool_calls_from_json(message.tool_calls_json):
            try:
                args = json.loads(call.arguments or "{}")
            except json.JSONDecodeError:
                args = {}
            calls.append(
                (call.name, args if isinstance(args, dict) else {}, results.get(call.id, ""))
            )
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
            f"fixture/ was RE-READ from cluster {session.cluster} at export time, as the "
            "channel's role reads it: the cluster now, not necessarily what the tools saw "
            f"when kelpie answered ({self.conversation.asked_at.isoformat()}). Compare it "
            "with the tool results in NOTES.md and edit it back to the incident if they "
            "differ. Secrets are never exported; ConfigMap values and secrets are masked.",
        ]
        for row in self.record.feedback:
            reason = f": {_masked(row.reason)}" if row.reason else ""
            lines.append(f"Feedback: {row.value} by {row.slack_user} on turn {row.turn_id}{reason}")
        return lines

    def notes(self) -> str:
        parts = [f"# {case_id(self.ref)}: what kelpie read in {self.ref.link}\n"]
        for index, (name, args, result) in enumerate(self.conversation.calls, 1):
            shown = json.dumps(args, sort_keys=True)
            parts.append(f"## {index}. `{name}` {_masked(shown)}\n\n```\n{_masked(result)}\n```\n")
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
