"""Types flow downward: the low layers of bot/ import no higher one.

Read from the source with `ast` (every import, including ones inside functions), so a
lazy import cannot hide a dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

BOT = Path(__file__).resolve().parents[1] / "bot"

# Lowest first. A module may import its own layer and the ones before it.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("bot.values", "bot.errors"),
    ("bot.config",),
    ("bot.model",),
    ("bot.store",),
    ("bot.tools",),
    ("bot.policy",),
    ("bot.approvals",),
    ("bot.agent",),
    ("bot.slack", "bot.terminal", "bot.metrics", "bot.health", "bot.logs", "bot.checks"),
    ("bot.app", "bot.cli"),
)
# The layers held to the rule (the ones everything else builds on).
CHECKED = ("bot.values", "bot.errors", "bot.config", "bot.model", "bot.store")


def layer_of(module: str) -> int | None:
    for index, prefixes in enumerate(LAYERS):
        if any(module == prefix or module.startswith(prefix + ".") for prefix in prefixes):
            return index
    return None


def module_name(path: Path) -> str:
    parts = path.relative_to(BOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_bot_modules(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            found.update(name for name in names if name.startswith("bot.") or name == "bot")
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("bot."))
    return found


def bot_modules() -> dict[str, Path]:
    return {module_name(path): path for path in BOT.rglob("*.py")}


def test_every_module_of_bot_has_a_layer() -> None:
    unplaced = sorted(name for name in bot_modules() if name != "bot" and layer_of(name) is None)
    assert unplaced == [], f"place these in LAYERS: {unplaced}"


def test_low_layers_import_no_higher_layer() -> None:
    modules = bot_modules()
    violations: set[str] = set()
    for name, path in sorted(modules.items()):
        own = layer_of(name)
        if own is None or not any(name == c or name.startswith(c + ".") for c in CHECKED):
            continue
        for target in sorted(imported_bot_modules(path)):
            # `from bot.x import name` names either a module or a value in bot.x: judge the
            # deepest prefix that is a module of bot/.
            module = max((m for m in modules if target == m or target.startswith(m + ".")), key=len)
            other = layer_of(module)
            if other is not None and other > own:
                violations.add(f"{name} imports {module}")
    assert sorted(violations) == []


def test_the_values_module_is_a_leaf() -> None:
    assert imported_bot_modules(BOT / "values.py") == set()
