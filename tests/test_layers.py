"""Types flow downward: no module of bot/ imports a higher layer.

Read from the source with `ast` (every import, including ones inside functions), so a
lazy import cannot hide a dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

BOT = Path(__file__).resolve().parents[1] / "bot"

# Lowest first. A module may import its own layer and the ones before it; every module of
# bot/ has a rank and every one is held to the rule.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("bot.values", "bot.errors"),
    ("bot.config",),
    ("bot.model",),
    ("bot.logs",),
    ("bot.store",),
    ("bot.toolsets",),
    ("bot.pipeline",),
    ("bot.approvals",),
    ("bot.agent",),
    (
        "bot.slack",
        "bot.terminal",
        "bot.metrics",
        "bot.health",
        "bot.alerts",
        "bot.eval",
        "bot.feedback",
        # kelpie's MCP server: a surface (its callers come in like Slack's people).
        "bot.mcp.server",
        "bot.mcp.server_access",
        "bot.mcp.server_copy",
        "bot.mcp.server_http",
    ),
    # The empty package (its modules are ranked above by their own names).
    ("bot.app", "bot.cli", "bot.checks", "bot.mcp"),
)


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


def test_no_module_imports_a_higher_layer() -> None:
    modules = bot_modules()
    violations: set[str] = set()
    for name, path in sorted(modules.items()):
        own = layer_of(name)
        if own is None:
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


def import_graph(package: str) -> dict[str, set[str]]:
    """The modules of `package` (its `__init__` aside: importing a submodule runs it
    anyway) and the ones of them each imports, type-checking imports included."""
    modules = bot_modules()
    inside = {name for name in modules if name.startswith(package + ".")}
    graph: dict[str, set[str]] = {}
    for name in sorted(inside):
        targets = imported_bot_modules(modules[name])
        graph[name] = {
            max((m for m in inside if t == m or t.startswith(m + ".")), key=len)
            for t in targets
            if any(t == m or t.startswith(m + ".") for m in inside)
        } - {name}
    return graph


def cycle_in(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle of `graph` (depth first), or [] when it has none."""
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> list[str]:
        if node in path:
            return [*path[path.index(node) :], node]
        if node in done:
            return []
        for target in sorted(graph.get(node, ())):
            if found := visit(target, [*path, node]):
                return found
        done.add(node)
        return []

    for node in sorted(graph):
        if found := visit(node, []):
            return found
    return []


def test_the_progress_package_has_no_import_cycle() -> None:
    graph = import_graph("bot.slack.progress")
    assert len(graph) >= 9  # the split modules are all seen
    assert cycle_in(graph) == []
    assert cycle_in({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_one_error_tree() -> None:
    """Every error kelpie raises for a person to read derives from `KelpieError` (its
    `user_message` is the sentence); none poses as a library's error, so no handler of
    that library's failures takes it for one (`BudgetSpent` is not a transport failure)."""
    import importlib
    import inspect

    import aiohttp

    from bot.errors import KelpieError

    found: list[str] = []
    for name in sorted(bot_modules()):
        if name.startswith("bot.store.migrations"):
            continue  # Alembic's scripts, run only by Alembic
        module = importlib.import_module(name)
        for _, value in inspect.getmembers(module, inspect.isclass):
            if value.__module__ != name or not issubclass(value, BaseException):
                continue
            qualified = f"{name}.{value.__qualname__}"
            found.append(qualified)
            assert issubclass(value, KelpieError), qualified
            assert not issubclass(value, aiohttp.ClientError), qualified
    assert {"bot.model.types.ModelError", "bot.slack.pacing.BudgetSpent"} <= set(found)
