"""Model capabilities from LiteLLM's bundled model map, read as data.

A profile on the openai-compatible client must not pay for `import litellm` (seconds and
~140 MB) just to learn whether its model calls tools in parallel or reasons. The map ships
inside the litellm package as JSON; this module finds the file without importing the
package and decodes only the one entry it looks up, so neither the 3.5 MB of text nor the
rest of the map stays in memory.
"""

from __future__ import annotations

import functools
import importlib.util
import json
from pathlib import Path
from typing import Any

from bot.model.types import ModelCapabilities

MAP_FILE = "model_prices_and_context_window_backup.json"
# The map is one object with one model per top-level key, indented four spaces.
_TOP_LEVEL = "\n    {key}: "


def map_path() -> Path | None:
    """Where the installed litellm keeps its model map (None: litellm is not installed)."""
    spec = importlib.util.find_spec("litellm")  # finds, never imports, a top-level package
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / MAP_FILE
    return path if path.is_file() else None


@functools.lru_cache(maxsize=64)
def map_capabilities(model: str) -> ModelCapabilities:
    """What the map says of `model` (a LiteLLM reference such as `openai/gpt-4o`): for
    `openai/` models what `gateway.probe_capabilities` answers (LiteLLM infers more for some
    other providers); unknown models answer False for both."""
    entry = _entry(model)
    if entry is None:
        return ModelCapabilities()
    return ModelCapabilities(
        parallel_tool_calls=bool(entry.get("supports_parallel_function_calling")),
        reasoning=bool(entry.get("supports_reasoning")),
    )


def _entry(model: str) -> dict[str, Any] | None:
    path = map_path()
    if path is None:
        return None
    text = path.read_text(encoding="utf-8")
    # LiteLLM keys its own providers' models by bare name (`gpt-4o`, provider `openai`).
    provider, _, name = model.partition("/")
    for key, owner in ((model, None), (name, provider)):
        if not key:
            continue
        entry = _decode_entry(text, key)
        if entry is not None and (owner is None or entry.get("litellm_provider") == owner):
            return entry
    return None


def _decode_entry(text: str, key: str) -> dict[str, Any] | None:
    start = text.find(_TOP_LEVEL.format(key=json.dumps(key)))
    if start < 0:
        return None
    start += len(_TOP_LEVEL.format(key=json.dumps(key)))
    value, _ = json.JSONDecoder().raw_decode(text, start)
    return value if isinstance(value, dict) else None
