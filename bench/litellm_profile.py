"""Where LiteLLM's CPU per request goes: cProfile of `litellm.acompletion` itself.

`python bench/litellm_profile.py` sends `bench/gateways.py`'s two requests (a tool call over
a ~124 kB conversation, a ~700-character answer streamed 4 characters per delta) straight to
`litellm.acompletion` on this process's loop (the gateway would run them on its own thread,
out of the profiler's sight), and prints `name: value` lines (CPU per request, with and
without the profiler) and the functions with the most time of their own.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import litellm  # noqa: E402

from bench.gateways import ANSWER, TOOLS, conversation  # noqa: E402
from tests.peers.model_server import ModelServer, TextStep, tool_calls_step  # noqa: E402


async def one_request(peer: ModelServer, messages: list[dict[str, Any]], tools: Any) -> None:
    stream = await litellm.acompletion(
        model="openai/test-model",
        api_base=peer.api_base,
        api_key="sk-bench",
        messages=messages,
        tools=tools,
        stream=True,
        stream_options={"include_usage": True},
        max_retries=0,
        num_retries=0,
    )
    async for _ in stream:
        pass


async def measure(name: str, peer: ModelServer, messages: Any, tools: Any, args: Any) -> None:
    for _ in range(3):  # imports, connections, first-use caches
        await one_request(peer, messages, tools)
    start = time.process_time()
    for _ in range(args.repeat):
        await one_request(peer, messages, tools)
    print(f"cpu_ms_{name}: {(time.process_time() - start) * 1000 / args.repeat:.1f}")
    profile = cProfile.Profile()
    start = time.process_time()
    profile.enable()
    for _ in range(args.repeat):
        await one_request(peer, messages, tools)
    profile.disable()
    print(f"cpu_ms_{name}_profiled: {(time.process_time() - start) * 1000 / args.repeat:.1f}")
    print(f"# {name}: functions by their own time, {args.repeat} requests")
    pstats.Stats(profile, stream=sys.stdout).sort_stats("tottime").print_stats(args.top)


async def main_async(args: argparse.Namespace) -> None:
    peer = ModelServer()
    await peer.start()
    try:
        peer.reply_default(tool_calls_step([("pod_logs", {"namespace": "shop"})]))
        await measure("tool_call", peer, conversation(args.chars), TOOLS, args)
        peer.reply_default(TextStep(ANSWER, chunk_size=4))
        await measure("answer_175_deltas", peer, conversation(args.chars)[:2], None, args)
    finally:
        await peer.stop()
    print(f"loadavg_1m: {os.getloadavg()[0]:.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--chars", type=int, default=124_000, help="conversation size")
    parser.add_argument("--repeat", type=int, default=10, help="measured requests per case")
    parser.add_argument("--top", type=int, default=15, help="functions listed per case")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
