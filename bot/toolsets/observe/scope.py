"""A role's namespaces, enforced inside PromQL and LogQL before a query leaves kelpie.

What prom-label-proxy does in front of Prometheus, done per channel: every vector selector
(PromQL) and every stream selector (LogQL) gets the role's namespaces as an anchored regex
matcher, found by parsing the query (`promql-parser` for PromQL and for LogQL's selectors),
never by concatenating text. A selector that names a namespace outside the role is refused
with one sentence the model can act on.

The parser's printer does not escape quotes or backslashes in strings, so its output is
never trusted: every selector is rendered by this module with proper escaping, and the final
text is parsed again and checked (each selector carries the scope matcher, no selector was
added or lost). Anything that does not survive that check is refused, not sent.

This module owns the rewriting only; which instance a query goes to, and the HTTP call, are
the Prometheus and Loki toolsets' jobs.
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass, field
from datetime import timedelta
from fnmatch import fnmatchcase

import promql_parser as promql

from bot.errors import KelpieError

# The sentences the model gets back (it can fix the query and call again).
UNPARSABLE = "The query is not valid {language}: {reason}."
OUTSIDE_ROLE = (
    "The query names namespace {namespace!r}, which this channel may not read; "
    "it may read {allowed}."
)
OR_MATCHERS = "Selectors with `or` between matchers are not supported; use two selectors."
NOT_SCOPABLE = "The query could not be limited to this channel's namespaces; simplify it."

# An alternation of plain names (`shop|payments`) can be checked name by name; any other
# regex is narrowed by the scope matcher that is always added beside it.
_PLAIN_ALTERNATION = re.compile(r"^[A-Za-z0-9_.-]+(\|[A-Za-z0-9_.-]+)*$")


# The regex of a reach of no namespace (with `label!=""` beside it: see `matchers`).
_NOTHING = "$^"


class QueryRefused(KelpieError):
    """A query kelpie will not send: `str(error)` is the sentence the model gets back."""


@dataclass(frozen=True)
class NamespaceScope:
    """The namespaces a role may read, as label matchers.

    `patterns` are the role's namespace globs ("*" = all). With `cluster_metrics`, series
    without the namespace label (nodes, cluster totals) are admitted too, never other
    namespaces. `denied` are the firewall's namespace globs, excluded whatever the role says.
    """

    patterns: tuple[str, ...]
    cluster_metrics: bool = False
    label: str = "namespace"
    denied: tuple[str, ...] = field(default=())

    def admits(self, namespace: str) -> bool:
        if any(fnmatchcase(namespace, glob) for glob in self.denied):
            return False
        return any(fnmatchcase(namespace, glob) for glob in self.patterns if glob)

    def matchers(self) -> list[str]:
        """The matchers added to every selector, rendered as PromQL/LogQL text."""
        alternatives = [_glob_regex(glob) for glob in self.patterns if glob]
        allowed = ".*" if ".*" in alternatives else "|".join(sorted(set(alternatives)))
        if self.cluster_metrics and allowed != ".*":
            allowed = f"{allowed}|" if allowed else ""
        elif not self.cluster_metrics:
            allowed = ".+" if allowed == ".*" else allowed or _NOTHING
        rendered = [_render_matcher(self.label, "=~", allowed)]
        if allowed == _NOTHING:
            # "$^" still matches the empty string, i.e. every series without the label:
            # a reach of no namespace must not admit them either.
            rendered.append(_render_matcher(self.label, "!=", ""))
        if self.denied:
            denied = "|".join(sorted({_glob_regex(glob) for glob in self.denied}))
            rendered.append(_render_matcher(self.label, "!~", denied))
        return rendered

    def describe(self) -> str:
        shown = ", ".join(glob for glob in self.patterns if glob) or "no namespace"
        return shown + (" and series without a namespace" if self.cluster_metrics else "")


def scope_promql(query: str, scope: NamespaceScope) -> str:
    """`query` with every vector selector limited to `scope`, or QueryRefused."""
    expr = _parse(query, "PromQL")
    nonce = secrets.token_hex(6)
    rendered: dict[str, str] = {}

    def replace(node: promql.Expr) -> promql.Expr | None:
        if not isinstance(node, promql.VectorSelector):
            return None
        placeholder = f"kelpie_{nonce}_{len(rendered)}"
        rendered[placeholder + "{}"] = _scoped_selector(node, scope)
        return promql.parse(placeholder + _modifiers(node))

    text = str(promql.transform(expr, post_visit=replace))
    for placeholder, selector in rendered.items():
        text = text.replace(placeholder, selector, 1)
    _verify(text, scope, expected=len(rendered))
    return text


def scope_logql(query: str, scope: NamespaceScope) -> str:
    """`query` with every stream selector `{…}` limited to `scope`, or QueryRefused.

    LogQL's selectors use PromQL's matcher syntax, so each one is parsed by the PromQL
    parser; the rest of the query (pipelines, metric functions) is left as written.
    """
    spans = list(_logql_selectors(query))
    if not spans:
        raise QueryRefused(UNPARSABLE.format(language="LogQL", reason="it has no {…} selector"))
    parts: list[str] = []
    cursor = 0
    for start, end in spans:
        selector = _parse(query[start:end], "LogQL")
        if not isinstance(selector, promql.VectorSelector) or selector.name:
            raise QueryRefused(
                UNPARSABLE.format(language="LogQL", reason=f"{query[start:end]} is no selector")
            )
        parts += [query[cursor:start], _scoped_selector(selector, scope)]
        cursor = end
    parts.append(query[cursor:])
    scoped = "".join(parts)
    for start, end in _logql_selectors(scoped):
        _verify(scoped[start:end], scope, expected=1)
    return scoped


def _parse(text: str, language: str) -> promql.Expr:
    try:
        return promql.parse(text)
    except (ValueError, TypeError) as error:
        reason = str(error).strip().rstrip(".") or "it could not be parsed"
        raise QueryRefused(UNPARSABLE.format(language=language, reason=reason)) from error


def _scoped_selector(node: promql.VectorSelector, scope: NamespaceScope) -> str:
    """The selector's own matchers (checked against the scope) plus the scope's."""
    matchers = node.matchers
    if matchers.or_matchers:
        raise QueryRefused(OR_MATCHERS)
    own = []
    for matcher in matchers.matchers:
        if matcher.name == scope.label:
            _check_named_namespaces(matcher, scope)
        own.append(_render_matcher(matcher.name, _OPERATORS[str(matcher.op)], matcher.value))
    return (node.name or "") + "{" + ",".join(own + scope.matchers()) + "}"


def _check_named_namespaces(matcher: promql.Matcher, scope: NamespaceScope) -> None:
    op = str(matcher.op)
    if op == str(promql.MatchOp.Equal):
        named = [matcher.value]
    elif op == str(promql.MatchOp.Re) and _PLAIN_ALTERNATION.match(matcher.value):
        named = matcher.value.split("|")
    else:
        return
    for namespace in named:
        if not scope.admits(namespace):
            raise QueryRefused(OUTSIDE_ROLE.format(namespace=namespace, allowed=scope.describe()))


def _modifiers(node: promql.VectorSelector) -> str:
    """The selector's `offset` and `@`, kept on the placeholder so the printer puts them
    where PromQL wants them (after a range, for a matrix selector)."""
    offset = node.offset
    text = ""
    if offset:
        sign = "-" if offset < timedelta(0) else ""
        text = f" offset {sign}{promql.display_duration(abs(offset))}"
    return text + (f" {node.at}" if node.at else "")


def _verify(text: str, scope: NamespaceScope, expected: int) -> None:
    """Parse what will be sent and check every selector carries the scope, exactly."""
    required = scope.matchers()
    selectors: list[promql.VectorSelector] = []

    def collect(node: promql.Expr) -> None:
        if isinstance(node, promql.VectorSelector):
            selectors.append(node)

    try:
        promql.walk(promql.parse(text), pre_visit=collect)
    except (ValueError, TypeError) as error:
        raise QueryRefused(NOT_SCOPABLE) from error
    if len(selectors) != expected or _has_placeholder(text):
        raise QueryRefused(NOT_SCOPABLE)
    for selector in selectors:
        present = {
            _render_matcher(m.name, _OPERATORS[str(m.op)], m.value)
            for m in selector.matchers.matchers
        }
        if selector.matchers.or_matchers or not set(required) <= present:
            raise QueryRefused(NOT_SCOPABLE)


def _has_placeholder(text: str) -> bool:
    return re.search(r"kelpie_[0-9a-f]{12}_\d+", text) is not None


def _logql_selectors(query: str) -> list[tuple[int, int]]:
    """The spans of `{…}` stream selectors, skipping string literals ("…", `…`)."""
    spans: list[tuple[int, int]] = []
    index, depth, start = 0, 0, 0
    while index < len(query):
        char = query[index]
        if char in '"`':
            index = _string_end(query, index)
            continue
        if char == "{":
            if depth == 0:
                start = index
            depth += 1
        elif char == "}" and depth:
            depth -= 1
            if depth == 0:
                spans.append((start, index + 1))
        index += 1
    if depth:
        raise QueryRefused(UNPARSABLE.format(language="LogQL", reason="a { is never closed"))
    return spans


def _string_end(query: str, start: int) -> int:
    """The index after the string literal opening at `start` (Go rules: \\ escapes in "…")."""
    quote, index = query[start], start + 1
    while index < len(query):
        if quote == '"' and query[index] == "\\":
            index += 2
            continue
        if query[index] == quote:
            return index + 1
        index += 1
    raise QueryRefused(UNPARSABLE.format(language="LogQL", reason="a string is never closed"))


def _glob_regex(glob: str) -> str:
    """A namespace glob as an RE2 fragment (PromQL anchors regex matchers itself)."""
    return "".join(
        ".*" if char == "*" else "." if char == "?" else re.escape(char) for char in glob
    )


def _render_matcher(name: str, op: str, value: str) -> str:
    # A JSON string is a valid Go string literal: quotes, backslashes and control
    # characters escaped, so no value can close the selector early.
    return f"{name}{op}{json.dumps(value)}"


_OPERATORS = {
    str(promql.MatchOp.Equal): "=",
    str(promql.MatchOp.NotEqual): "!=",
    str(promql.MatchOp.Re): "=~",
    str(promql.MatchOp.NotRe): "!~",
}
