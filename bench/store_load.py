"""The store under load: bursts of mentions through the test world's peers, on SQLite and on
a real PostgreSQL (started here, as the tests do). Prints `name: value` lines.

    .venv/bin/python bench/store_load.py                # both databases, both loads
    .venv/bin/python bench/store_load.py --db sqlite --mentions 50

Loads: `burst` sends N mentions at a fixed rate (default 200 at 20/s), each a new thread;
`concurrent` sends M mentions at once (default 50). Every turn makes one tool call
(`list_pods`) and answers, so it writes a session, messages, usage, tool audits and a payload
snapshot. Figures per load and database:
answered / lost (no answer within the timeout), locked (log lines saying "database is
locked"), commits_per_round (the writer's commits / model rounds), ack_ms p50/p99 (envelope
sent → Socket Mode ack received). Peers and bot share this process, as in the tests.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.peers.model_server import DynamicStep, Step, TextStep, tool_calls_step
from tests.postgres import PostgresServer
from tests.world import ALICE, SHOP_CHANNEL, World, running_world


class LockedCounter(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage() + (str(record.exc_info[1]) if record.exc_info else "")
        if "database is locked" in text:
            self.count += 1


def _step(body: dict[str, Any]) -> Step:
    messages = body["messages"]
    if messages[-1]["role"] != "tool":
        return tool_calls_step([("list_pods", {"namespace": "shop"})])
    asked = next(m["content"] for m in messages if m["role"] == "user")
    number = re.search(r"question (\d+)", str(asked))
    return TextStep(f"Answer to question {number.group(1) if number else '?'}.")


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def _load(world: World, count: int, rate: float | None, timeout: float) -> dict[str, Any]:
    world.model.reply_default(DynamicStep(_step))
    bot = await world.start_bot()
    commits_before, requests_before = bot.db.writer.commits, len(world.model.requests)
    sent: dict[str, float] = {}
    mentions = []

    async def send(index: int) -> None:
        mention = world.slack.mention(SHOP_CHANNEL, ALICE, f"question {index}")
        mentions.append(mention)
        started = time.monotonic()
        envelope = await world.slack.deliver_event(mention)
        sent[envelope] = started

    if rate is None:
        await asyncio.gather(*(send(i) for i in range(count)))
    else:
        tasks = []
        for index in range(count):
            tasks.append(asyncio.create_task(send(index)))
            await asyncio.sleep(1 / rate)
        await asyncio.gather(*tasks)

    def answered(server: Any) -> int:
        return sum(
            any(m.is_bot and m.text.startswith("Answer to") for m in server.thread(SHOP_CHANNEL, t))
            for t in (mention["ts"] for mention in mentions)
        )

    try:
        await world.slack.wait_for(lambda server: answered(server) >= count, timeout=timeout)
    except TimeoutError:
        pass  # counted as lost below
    await world.drain()
    done = answered(world.slack)
    acks = [(world.slack.acks[e].time - t) * 1000 for e, t in sent.items() if e in world.slack.acks]
    rounds = len(world.model.requests) - requests_before
    result = {
        "answered": done,
        "lost": count - done,
        "unacked": count - len(acks),
        "commits_per_round": round((bot.db.writer.commits - commits_before) / max(rounds, 1), 2),
        "ack_ms_p50": round(_pct(acks, 0.5), 1),
        "ack_ms_p99": round(_pct(acks, 0.99), 1),
    }
    await world.stop_bot(bot)
    return result


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument("--mentions", type=int, default=200)
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--threads", type=int, default=50)
    parser.add_argument("--timeout", type=float, default=180.0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    locked = LockedCounter()
    logging.getLogger().addHandler(locked)
    print(f"loadavg_1m_before: {os.getloadavg()[0]:.1f}")
    databases = ["sqlite", "postgresql"] if args.db == "both" else [args.db]
    postgres = None
    if "postgresql" in databases:
        postgres = PostgresServer()
        postgres.start()
    try:
        for database in databases:
            loads = {"burst": (args.mentions, args.rate), "concurrent": (args.threads, None)}
            for load, (count, rate) in loads.items():
                locked.count = 0
                with tempfile.TemporaryDirectory() as tmp:
                    url = (
                        await postgres.new_database() if postgres and database != "sqlite" else None
                    )
                    async with running_world(Path(tmp), database_url=url) as world:
                        result = await _load(world, count, rate, args.timeout)
                name = f"{database}_{load}_{count}" + (f"_at_{rate:g}_per_s" if rate else "")
                result["locked"] = locked.count
                for key, value in result.items():
                    print(f"{name}_{key}: {value}", flush=True)
    finally:
        if postgres is not None:
            postgres.stop()
    print(f"loadavg_1m_after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    asyncio.run(main())
