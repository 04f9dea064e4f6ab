"""The evidence ledger of one turn: what the model read, under references it can cite.

Each successful read/diagnose result gets `[E1]`, `[E2]`… (failures, denials, writes and
presentations get none). The ledger is shown to the model with each round's request, and
the final answer's references are checked against it: unknown ones are removed and logged.
A new ledger starts with every turn.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

# One citation: [E3], or a list in one bracket: [E1, E3].
_CITATION = re.compile(r"\[\s*E\d+(?:\s*,\s*E\d+)*\s*\]")
_REF = re.compile(r"E\d+")
CITING = (
    "How to cite evidence: tool results you read are labelled [E1], [E2]…; put the label "
    "after each claim it supports, e.g. 'the pod was OOMKilled [E2]'. Labels start again "
    "with each question: cite only labels listed in this turn's evidence ledger; never "
    "invent one."
)


@dataclass(frozen=True)
class Evidence:
    ref: str
    tool: str
    arguments: str  # compact JSON of the call's arguments
    # What the tool says it asked of which backend (e.g. the scoped query, its window and
    # the instance): shown in place of the arguments, which it makes exact.
    sent: str | None = None

    def line(self) -> str:
        return f"[{self.ref}] {self.tool} {self.sent or self.arguments}"


class EvidenceLedger:
    def __init__(self) -> None:
        self._entries: list[Evidence] = []

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def refs(self) -> list[str]:
        return [entry.ref for entry in self._entries]

    def add(self, tool: str, arguments: dict[str, Any], sent: str | None = None) -> str:
        ref = f"E{len(self._entries) + 1}"
        compact = json.dumps(arguments, sort_keys=True, separators=(",", ":"))
        self._entries.append(Evidence(ref, tool, compact, sent))
        return ref

    def note(self) -> str | None:
        """The ledger as a note for the next request, or None while it is empty."""
        if not self._entries:
            return None
        lines = [entry.line() for entry in self._entries]
        return "Evidence ledger of this turn (cite only these):\n" + "\n".join(lines)

    def check(self, answer: str, *, log_unknown: bool = True) -> tuple[str, list[str]]:
        """Remove citations of unknown references; returns (answer, references used)."""
        known = set(self.refs)
        used: list[str] = []
        unknown: list[str] = []

        def replace(match: re.Match[str]) -> str:
            refs = _REF.findall(match.group(0))
            good = [ref for ref in refs if ref in known]
            unknown.extend(ref for ref in refs if ref not in known)
            for ref in good:
                if ref not in used:
                    used.append(ref)
            return f"[{', '.join(good)}]" if good else ""

        checked = _CITATION.sub(replace, answer)
        if unknown:
            if log_unknown:
                log.warning("removed unknown evidence references from the answer: %s", unknown)
            # A removed citation may leave a space before punctuation or a double space.
            checked = re.sub(r"[ \t]+([.,;:!?)])", r"\1", checked)
            checked = re.sub(r"[ \t]{2,}", " ", checked)
        used.sort(key=lambda ref: int(ref[1:]))
        return checked, used


class CitationFilter:
    """Drops citations of unknown references from streamed text, whatever the deltas.

    Text from a `[` on is held back until the bracket closes (or clearly is not a
    citation), so a person never sees a reference the ledger does not hold.
    """

    _MAX_HELD = 40

    def __init__(self, ledger: EvidenceLedger) -> None:
        self._ledger = ledger
        self._held = ""

    def feed(self, delta: str) -> str:
        out: list[str] = []
        for char in delta:
            if self._held:
                self._held += char
                if char == "]":
                    out.append(self._ledger.check(self._held, log_unknown=False)[0])
                    self._held = ""
                elif not _CITATION_PREFIX.match(self._held) or len(self._held) > self._MAX_HELD:
                    out.append(self._held)
                    self._held = ""
            elif char == "[":
                self._held = char
            else:
                out.append(char)
        return "".join(out)

    def finish(self) -> str:
        held, self._held = self._held, ""
        return held


# A possibly unfinished citation: "[", "[E", "[E1", "[E1, E", "[E1,"…
_CITATION_PREFIX = re.compile(r"^\[\s*(?:E\d*(?:\s*,\s*(?:E\d*)?)*)?$")


def strip_citations(text: str) -> str:
    """Remove every [E#] citation (a sub-agent's refs mean nothing in the main turn)."""
    text = _CITATION.sub("", text)
    return re.sub(r"[ \t]+([.,;:!?)])", r"\1", text)
