"""What the offered tools cost in every model request: their JSON size per role.

Run: `python bench/tool_schemas.py [config.yaml]` (default: config/kelpie.example.yaml).
Every model request carries the schemas of the tools the channel's role is offered, so a
tool's description and arguments are paid for on every round of every turn. This prints,
for each role of the config (every observability backend counted as configured) and for
roles with every read and diagnose (and present) toolset, how many tools are offered and
their size as the wire client sends them (compact JSON of the `tools` array), and the
largest tools. Issue #27 holds every read and diagnose toolset under 12 kB.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from bot.app import buildable_tools
from bot.config import RoleConfig, load_config
from bot.pipeline.roles import offered_tools
from bot.toolsets.spec import Tool

ROOT = Path(__file__).resolve().parents[1]
ALL_READS = RoleConfig(tools=["present/*", "read/*", "diagnose/*"], namespaces=["*"])
READ_DIAGNOSE = RoleConfig(tools=["read/*", "diagnose/*"], namespaces=["*"])
BUDGET_BYTES = 12_000


def size(tools: list[Tool]) -> int:
    """Bytes of the `tools` array as the wire client encodes the request body."""
    schemas = [tool.openai_schema() for tool in tools]
    return len(json.dumps(schemas, separators=(",", ":")).encode())


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "config" / "kelpie.example.yaml"
    config = load_config(path)
    tools = buildable_tools()  # every toolset, Prometheus, Loki and Alertmanager included
    roles = {
        **config.roles,
        "(every read and diagnose toolset)": READ_DIAGNOSE,
        "(every read, diagnose and present toolset)": ALL_READS,
    }
    print(f"{'role':<46} {'tools':>5} {'bytes':>7}")
    for name, role in roles.items():
        offered = offered_tools(role, tools)
        print(f"{name:<46} {len(offered):>5} {size(offered):>7,}")
    every = offered_tools(ALL_READS, tools)
    total = size(every)
    verdict = "under" if total < BUDGET_BYTES else "OVER"
    print(f"\nevery read/diagnose/present tool: {total:,} bytes, {verdict} {BUDGET_BYTES:,}")
    print("largest tools:")
    for tool in sorted(tools, key=lambda t: size([t]), reverse=True)[:8]:
        print(f"  {tool.pattern_name:<40} {size([tool]):>6,}")


if __name__ == "__main__":
    main()
