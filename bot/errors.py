"""One error tree. Each error carries a sentence a person can act on; tracebacks go to logs."""

from __future__ import annotations


class KelpieError(Exception):
    """Base class: `user_message` is the sentence a person can act on (`str(error)` unless
    a subclass keeps a detail for the log apart from it, as `ModelError` does)."""

    @property
    def user_message(self) -> str:
        return str(self)


class ConfigError(KelpieError):
    """The configuration is invalid; `problems` holds one line per problem (key path: fix)."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


class StoreError(KelpieError):
    """The database cannot be used: unreachable, a wrong URL, or a schema from a newer kelpie."""


class ExportError(KelpieError):
    """`kelpie eval export` cannot write the case (a bad link, a thread kelpie never saw)."""


class Undeliverable(KelpieError):
    """A surface refused a message for good (its channel archived or gone, the app taken out
    of it, its token dead): no retry will deliver it. `code` is the surface's own reason."""

    def __init__(self, code: str) -> None:
        super().__init__(f"the thread refuses messages for good ({code})")
        self.code = code
