"""Routes: an alert group's labels → a channel. First match wins; equality on `match`,
anchored RE2 on `match_re` (linear time: the labels are untrusted text)."""

from __future__ import annotations

from dataclasses import dataclass

import re2

from bot.config import AlertRoute


@dataclass(frozen=True)
class Route:
    index: int
    config: AlertRoute
    patterns: tuple[tuple[str, re2._Regexp], ...]

    def matches(self, labels: dict[str, str]) -> bool:
        if any(labels.get(name) != value for name, value in self.config.match.items()):
            return False
        return all(
            pattern.fullmatch(labels.get(name, "")) is not None for name, pattern in self.patterns
        )


class Routes:
    def __init__(self, routes: list[AlertRoute]) -> None:
        self._routes = tuple(
            Route(
                index,
                route,
                tuple((name, re2.compile(f"(?:{p})")) for name, p in route.match_re.items()),
            )
            for index, route in enumerate(routes)
        )

    def pick(self, labels: dict[str, str]) -> Route | None:
        return next((route for route in self._routes if route.matches(labels)), None)
