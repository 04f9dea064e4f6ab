"""What a thread is about, as far as knowledge is matched to it: its namespaces, the words
of its opening and its question, the `key=value` labels they carry (an alert's) and its
alert names. Read from text only: nothing is asked of the cluster to build it."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_PAIR = re.compile(r"([A-Za-z_][A-Za-z0-9_./-]*)=\"?([A-Za-z0-9][A-Za-z0-9_.:/-]*)")
_NAMESPACE_KEYS = ("namespace", "default_namespace", "exported_namespace")


@dataclass(frozen=True)
class ThreadSubject:
    namespaces: tuple[str, ...] = ()
    words: frozenset[str] = frozenset()
    labels: frozenset[tuple[str, str]] = frozenset()
    alerts: tuple[str, ...] = ()

    @classmethod
    def of(cls, namespace: str | None, texts: Iterable[str]) -> ThreadSubject:
        """The subject of a thread whose channel defaults to `namespace`, from its texts."""
        text = "\n".join(texts)
        pairs = frozenset((key, value.rstrip(".,;:")) for key, value in _PAIR.findall(text))
        words = {word.lower().rstrip(".,;:") for word in _WORD.findall(text.replace("/", " "))}
        found = [value for key, value in pairs if key in _NAMESPACE_KEYS and value != "-"]
        namespaces = tuple(dict.fromkeys([*([namespace] if namespace else []), *found]))
        alerts = tuple(sorted({value for key, value in pairs if key == "alertname"}))
        return cls(namespaces, frozenset(words), pairs, alerts)
