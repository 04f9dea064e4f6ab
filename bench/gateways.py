"""CPU per model request of each provider client, against the scripted model, in one process.

`python bench/gateways.py` sends the same requests through `LiteLLMGateway` and
`OpenAIWireGateway`: a tool-call request over a ~124 kB conversation (the size of a late
round of a 20-round turn) and a ~700-character answer streamed 4 characters per delta.
Prints `name: value` lines: process CPU per request and the CPU of the thread whose loop
called (`loop_cpu_ms_…`: what the bot's loop pays), median of `--repeat` requests, after
warm-up. The scripted peer runs in this process, so its own CPU is in every figure (the
same for both clients).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from bot.model.gateway import LiteLLMGateway  # noqa: E402
from bot.model.openai_wire import OpenAIWireGateway  # noqa: E402
from bot.model.types import ModelRequest, ProviderGateway, ProviderSettings  # noqa: E402
from tests.peers.model_server import ModelServer, TextStep, tool_calls_step  # noqa: E402

ANSWER = ("The pods of checkout-api restart because the container runs out of memory. " * 9)[:700]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": f"tool_{i}",
            "description": "A read tool of the cluster. " * 4,
            "parameters": {
                "type": "object",
                "properties": {"namespace": {"type": "string"}, "name": {"type": "string"}},
            },
        },
    }
    for i in range(20)
]


def conversation(chars: int) -> list[dict[str, Any]]:
    """System prompt, question, then tool rounds with ~3 kB log results up to `chars`."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are kelpie. " * 200},
        {"role": "user", "content": "why is checkout-api crashlooping?"},
    ]
    line = "2026-12-03T10:00:00Z INFO checkout-api handled request path=/cart status=200\n"
    i = 0
    while sum(len(str(m.get("content") or "")) for m in messages) < chars:
        call = {"id": f"call_{i}", "type": "function"}
        call["function"] = {"name": "pod_logs", "arguments": '{"namespace": "shop"}'}
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"call_{i}", "content": line * 40})
        i += 1
    return messages


async def cpu_per_request(
    gateway: ProviderGateway, peer: ModelServer, request: ModelRequest, repeat: int
) -> tuple[float, float]:
    """(process CPU, CPU of the calling loop's thread) per request, ms: `LiteLLMGateway`
    does its work on a thread of its own, so only the second holds up the bot's loop."""

    async def ignore(_: str) -> None:
        return None

    for _ in range(3):  # warm: imports, connections, first-use caches
        await gateway.complete(request, ignore)
    process, loop = [], []
    for _ in range(repeat):
        start, start_loop = time.process_time(), time.thread_time()
        await gateway.complete(request, ignore)
        process.append(time.process_time() - start)
        loop.append(time.thread_time() - start_loop)
    return statistics.median(process) * 1000, statistics.median(loop) * 1000


async def main_async(args: argparse.Namespace) -> None:
    peer = ModelServer()
    await peer.start()
    settings = ProviderSettings("openai/test-model", peer.api_base, "sk-bench", timeout_s=30)
    messages = conversation(args.chars)
    print(f"conversation_chars: {sum(len(str(m.get('content') or '')) for m in messages)}")
    try:
        for name, client in (("litellm", LiteLLMGateway), ("openai_compatible", OpenAIWireGateway)):
            gateway: ProviderGateway = client(settings)
            peer.reply_default(tool_calls_step([("pod_logs", {"namespace": "shop"})]))
            ms = await cpu_per_request(gateway, peer, ModelRequest(messages, TOOLS), args.repeat)
            print(f"cpu_ms_tool_call_{name}: {ms[0]:.1f}", flush=True)
            print(f"loop_cpu_ms_tool_call_{name}: {ms[1]:.1f}", flush=True)
            peer.reply_default(TextStep(ANSWER, chunk_size=4))
            short = ModelRequest(messages[:2])
            ms = await cpu_per_request(gateway, peer, short, args.repeat)
            print(f"cpu_ms_answer_175_deltas_{name}: {ms[0]:.1f}", flush=True)
            print(f"loop_cpu_ms_answer_175_deltas_{name}: {ms[1]:.1f}", flush=True)
            await gateway.close()
    finally:
        await peer.stop()
    print(f"loadavg_1m: {os.getloadavg()[0]:.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--chars", type=int, default=124_000, help="conversation size")
    parser.add_argument("--repeat", type=int, default=20, help="measured requests per case")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
