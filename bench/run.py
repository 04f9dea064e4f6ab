"""kelpie's own cost, measured against the test world's peers: `python bench/run.py`.

The fake Slack workspace, the scripted (instant) OpenAI-compatible model and the fake
Kubernetes API run in this process; the bot runs as `kelpie run` in a subprocess
(`bench/bot_process.py`), so its CPU, memory and start-up are its own. Prints one
`name: value` line per figure; see bench/README.md for what each one means.

Phases: start → ready; sequential turns of 1, 5 and 20 model rounds (per-round overhead,
CPU, Slack calls and database commits per round); then a burst of mentions at a fixed
rate, each in its own thread (ack latency, first reply, answer, RSS after the burst).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import aiohttp  # noqa: E402
import yaml  # noqa: E402
from aiohttp import web  # noqa: E402

from tests.peers.kube_server import KubeServer  # noqa: E402
from tests.peers.model_server import ModelServer, Step, TextStep, tool_calls_step  # noqa: E402
from tests.peers.slack_server import RecordedCall, SlackServer  # noqa: E402
from tests.world import ALICE, SHOP_CHANNEL, base_config, environ, merge  # noqa: E402

TAG = re.compile(r"bench T(\d+) rounds=(\d+)")
LOG_POD = "bench-logs"
POSTING = ("chat.postMessage", "chat.startStream", "chat.postEphemeral")


def answer_text(turn: int) -> str:
    """A ~700-character Markdown answer, streamed 4 characters per delta like the tests."""
    body = (
        "## What I found\n"
        "The `checkout-api` deployment in *shop* has one pod crash-looping:\n"
        "- `checkout-api-m4n8p` restarted 7 times, last terminated **OOMKilled**\n"
        "- the other two pods are ready and serve traffic\n"
        "- readiness probes fail with HTTP 503 while the cache loads\n\n"
        "## Why\n"
        "The JVM heap is too small for the catalog cache (see the previous logs: "
        "`java.lang.OutOfMemoryError: Java heap space` at `Cache.load`).\n\n"
        "## What to do\n"
        "1. Raise the memory limit or lower the cache size.\n"
        "2. Roll the deployment and watch the restarts.\n"
    )
    return f"{body}\nendT{turn}x"


def end_token(turn: int) -> str:
    return f"endT{turn}x"


def round_step(turn: int, rounds: int, done: int) -> Step:
    """Round `done` of a turn that makes `rounds` model calls: tool calls, then the answer."""
    if done >= rounds - 1:
        return TextStep(answer_text(turn))
    if done == 0:
        return tool_calls_step([("list_pods", {"namespace": "shop"})])
    args = {"namespace": "shop", "name": LOG_POD, "tail_lines": 60 + done}
    return tool_calls_step([("pod_logs", args)])


def tagged(body: dict[str, Any]) -> tuple[int, int, int] | None:
    """(turn, rounds, rounds done so far) from a request's messages."""
    messages = body.get("messages") or []
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        content = message.get("content")
        if message.get("role") == "user" and isinstance(content, str):
            found = TAG.search(content)
            if found:
                later = messages[index + 1 :]
                done = sum(1 for m in later if m.get("role") == "assistant" and m.get("tool_calls"))
                return int(found[1]), int(found[2]), done
    return None


class TimedModel(ModelServer):
    """The scripted model; remembers when each tagged request arrived and was answered."""

    def __init__(self) -> None:
        super().__init__()
        self.timings: dict[int, list[tuple[float, float]]] = defaultdict(list)
        self.reply_with_default()

    def reply_with_default(self) -> None:
        def decide(body: dict[str, Any]) -> Step:
            tag = tagged(body)
            if tag is None:
                return TextStep("ok")
            return round_step(*tag)

        from tests.peers.model_server import DynamicStep

        self.reply_default(DynamicStep(decide))

    async def _chat_completions(self, request: web.Request) -> web.StreamResponse:
        arrived = time.monotonic()
        body = await request.json()
        response = await super()._chat_completions(request)
        tag = tagged(body)
        if tag is not None:
            self.timings[tag[0]].append((arrived, time.monotonic()))
        return response


@dataclass
class SlackWatch:
    """Indexes the fake Slack's recorded calls as they come: first reply and answer."""

    slack: SlackServer
    seen: int = 0
    first_reply: dict[str, float] = field(default_factory=dict)
    answered: dict[str, float] = field(default_factory=dict)
    thread_calls: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def scan(self) -> None:
        calls = self.slack.calls
        while self.seen < len(calls):
            self._index(calls[self.seen])
            self.seen += 1

    def _index(self, call: RecordedCall) -> None:
        thread = call.params.get("thread_ts") or call.params.get("ts")
        if isinstance(thread, str):
            self.thread_calls[thread] += 1
        if call.method in POSTING and isinstance(call.params.get("thread_ts"), str):
            self.first_reply.setdefault(call.params["thread_ts"], call.time)
        found = re.search(r"endT(\d+)x", json.dumps(call.params))
        if found:
            self.answered.setdefault(found[1], call.time)

    async def wait_answers(self, turns: list[int], timeout: float) -> list[int]:
        """Waits until every turn answered or `timeout` passed; returns the unanswered."""
        deadline = time.monotonic() + timeout
        while True:
            self.scan()
            missing = [turn for turn in turns if str(turn) not in self.answered]
            if not missing or time.monotonic() > deadline:
                return missing
            await asyncio.sleep(0.01)


class BotProcess:
    """`kelpie run` in a subprocess, with the stats channel of bench/bot_process.py."""

    def __init__(self, config_path: Path, env: dict[str, str], log_path: Path) -> None:
        self.log_path = log_path
        self._log = log_path.open("w")
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "bench" / "bot_process.py"), str(config_path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            env={**os.environ, **env},
            cwd=ROOT,
            text=True,
        )

    async def stats(self) -> dict[str, Any]:
        return await self.ask("stats")

    async def ask(self, command: str) -> dict[str, Any]:
        """One line to bot_process.py's control channel (`stats`, `profile`,
        `profile-stop PATH`), one JSON line back."""

        def ask() -> dict[str, Any]:
            assert self.proc.stdin is not None and self.proc.stdout is not None
            self.proc.stdin.write(command + "\n")
            self.proc.stdin.flush()
            result: dict[str, Any] = json.loads(self.proc.stdout.readline())
            return result

        return await asyncio.to_thread(ask)

    async def wait_ready(self, port: int, timeout: float = 120) -> float:
        url = f"http://127.0.0.1:{port}/readyz"
        deadline = self.started + timeout
        async with aiohttp.ClientSession() as http:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"the bot exited; see {self.log_path}")
                try:
                    async with http.get(url) as response:
                        if response.status == 200:
                            return time.monotonic() - self.started
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.02)
        raise TimeoutError(f"not ready within {timeout}s; see {self.log_path}")

    async def stop(self) -> float:
        started = time.monotonic()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.to_thread(self.proc.wait, 30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return time.monotonic() - started

    def log_problems(self) -> list[str]:
        text = self.log_path.read_text(errors="replace")
        return [line for line in text.splitlines() if " ERROR " in line or "Traceback" in line]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def pct(values: list[float], q: float) -> float:
    """The q-th percentile (nearest rank); 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


class Figures:
    """Collects `name: value` lines in order and prints them as they come."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    def add(self, name: str, value: Any, unit: str = "") -> None:
        if isinstance(value, float):
            value = round(value, 1 if abs(value) >= 10 else 3)
        self.values[name] = value
        print(f"{name}: {value}{(' ' + unit) if unit else ''}", flush=True)

    def spread(self, name: str, values: list[float], unit: str) -> None:
        self.add(f"{name}_p50", pct(values, 50), unit)
        self.add(f"{name}_p99", pct(values, 99), unit)


@dataclass
class Bench:
    slack: SlackServer
    model: TimedModel
    kube: KubeServer
    bot: BotProcess
    watch: SlackWatch
    out: Figures
    next_turn: int = 0
    next_ts: float = 1_800_000_000.0
    # `--profile-turns DIR`: the first and the tenth 1-round turn profiled, on every loop.
    profile_dir: str | None = None

    async def mention(self, rounds: int, channel: str = SHOP_CHANNEL) -> tuple[int, str, float]:
        """A person mentions the bot in a new thread; (turn, thread ts, time sent)."""
        self.next_turn += 1
        turn = self.next_turn
        self.next_ts += 1
        ts = f"{self.next_ts:.6f}"
        event = self.slack.mention(channel, ALICE, f"bench T{turn} rounds={rounds}", ts=ts)
        sent = time.monotonic()
        await self.slack.deliver_event(event)
        return turn, event["ts"], sent

    async def turn(self, rounds: int, profile_as: str | None = None) -> dict[str, Any]:
        """One turn on a quiet bot; its timeline and what it cost. `profile_as`: profiled
        into `profile_dir`/`profile_as`.<thread> (with `--profile-turns`)."""
        profile = self.profile_dir and profile_as and os.path.join(self.profile_dir, profile_as)
        if profile:
            await self.bot.ask("profile")
        before = await self.bot.stats()
        calls_before = len(self.slack.calls)
        turn, ts, sent = await self.mention(rounds)
        if await self.watch.wait_answers([turn], timeout=60 + 3 * rounds):
            raise TimeoutError(f"turn {turn} ({rounds} rounds) got no answer; see the bot log")
        await asyncio.sleep(0.3)  # let the turn's tail (stream stop, bookkeeping) finish
        after = await self.bot.stats()
        if profile:
            for path in (await self.bot.ask(f"profile-stop {profile}"))["written"]:
                print(f"# profile: {path}", flush=True)
        timings = self.model.timings[turn]
        gaps = [timings[i + 1][0] - timings[i][1] for i in range(len(timings) - 1)]
        return {
            "rounds": len(timings),
            "to_model_ms": (timings[0][0] - sent) * 1000,
            "gaps_ms": [g * 1000 for g in gaps],
            "to_slack_ms": (self.watch.answered[str(turn)] - timings[-1][1]) * 1000,
            "answer_ms": (self.watch.answered[str(turn)] - sent) * 1000,
            "cpu_s": after["cpu_s"] - before["cpu_s"],
            "commits": after["commits"] - before["commits"],
            "statements": after["statements"] - before["statements"],
            "slack_calls": len(self.slack.calls) - calls_before,
            "ts": ts,
            "new_modules": after["new_modules"],
        }

    async def burst(
        self, count: int, rate: float, channels: list[str]
    ) -> list[tuple[int, str, float, str]]:
        """`count` mentions, each in a new thread, `rate` per second on a fixed schedule,
        taking `channels` in turn."""
        sent: list[tuple[int, str, float, str]] = []
        start = time.monotonic()
        for index in range(count):
            delay = start + index / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            self.next_turn += 1
            self.next_ts += 1
            ts = f"{self.next_ts:.6f}"
            text = f"bench T{self.next_turn} rounds=1"
            event = self.slack.mention(channels[index % len(channels)], ALICE, text, ts=ts)
            at = time.monotonic()
            envelope_id = await self.slack.deliver_event(event)
            sent.append((self.next_turn, ts, at, envelope_id))
        return sent


# --- phases --------------------------------------------------------------------------------


async def phase_start(bench: Bench, health_port: int) -> None:
    bench.out.add("start_to_ready_s", await bench.bot.wait_ready(health_port), "s")
    stats = await bench.bot.stats()
    bench.out.add("litellm_imported_at_ready", stats["litellm_loaded"])
    await asyncio.sleep(1.0)
    stats = await bench.bot.stats()
    bench.out.add("rss_idle_mb", stats["rss_kb"] / 1024, "MB")
    bench.out.add("threads_idle", stats["threads"])
    bench.out.add("cpu_start_s", stats["cpu_s"], "s")


async def phase_turns(bench: Bench, repeats: dict[int, int]) -> None:
    out = bench.out
    first = await bench.turn(1, "first")
    out.add("first_answer_ms", first["answer_ms"], "ms")
    out.add("rss_after_first_turn_mb", (await bench.bot.stats())["rss_kb"] / 1024, "MB")
    # What the first turn still imported (lazily, on the clock of the first answer).
    out.add("modules_imported_by_first_turn", len(first["new_modules"]))
    for name in first["new_modules"][:12]:
        print(f"# first turn imported {name}", flush=True)
    results: dict[int, list[dict[str, Any]]] = {}
    for rounds, count in repeats.items():
        if count:
            # The tenth 1-round turn after start is the ninth here (the first came before).
            names = {8: "tenth"} if rounds == 1 else {}
            results[rounds] = [await bench.turn(rounds, names.get(i)) for i in range(count)]
    ones = results.get(1, [first])
    out.add("tenth_answer_ms", ones[min(8, len(ones) - 1)]["answer_ms"], "ms")
    for rounds, turns in results.items():
        report_turns(out, rounds, turns)


def report_turns(out: Figures, rounds: int, turns: list[dict[str, Any]]) -> None:
    played = {t["rounds"] for t in turns}
    if played != {rounds}:
        raise RuntimeError(f"turns of {rounds} rounds played {played} model rounds")
    name = f"r{rounds}"
    if rounds == 1:
        # One model call: the bot's own time is event → request plus answer → Slack.
        out.spread(
            "round_overhead_ms_r1", [t["to_model_ms"] + t["to_slack_ms"] for t in turns], "ms"
        )
    else:
        gaps = [g for t in turns for g in t["gaps_ms"]]
        out.spread(f"round_overhead_ms_{name}", gaps, "ms")
    out.add(f"event_to_model_ms_{name}_p50", pct([t["to_model_ms"] for t in turns], 50), "ms")
    out.add(f"answer_to_slack_ms_{name}_p50", pct([t["to_slack_ms"] for t in turns], 50), "ms")
    if rounds >= 10:
        early = statistics.median(g for t in turns for g in t["gaps_ms"][:4])
        late = statistics.median(g for t in turns for g in t["gaps_ms"][-4:])
        out.add(f"round_overhead_ms_{name}_first4_p50", early, "ms")
        out.add(f"round_overhead_ms_{name}_last4_p50", late, "ms")
    out.add(f"cpu_per_turn_s_{name}", statistics.median(t["cpu_s"] for t in turns), "s")
    total_rounds = rounds * len(turns)
    out.add(f"slack_calls_per_round_{name}", sum(t["slack_calls"] for t in turns) / total_rounds)
    out.add(f"db_commits_per_round_{name}", sum(t["commits"] for t in turns) / total_rounds)
    out.add(f"db_statements_per_round_{name}", sum(t["statements"] for t in turns) / total_rounds)


class LagWatch:
    """How late this process's own event loop runs (the fake Slack's): an ack is timed
    here, so the figures cannot be sharper than this process's own delays."""

    def __init__(self, tick_s: float = 0.005) -> None:
        self.tick_s = tick_s
        self.lags: list[float] = []
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._watch())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _watch(self) -> None:
        while True:
            started = time.monotonic()
            await asyncio.sleep(self.tick_s)
            self.lags.append((time.monotonic() - started - self.tick_s) * 1000)


async def phase_burst(bench: Bench, count: int, rate: float, channels: int) -> None:
    out = bench.out
    out.add("burst_channels", channels)
    before = await bench.bot.stats()
    lag = LagWatch()
    lag.start()
    sent = await bench.burst(count, rate, burst_channels(channels))
    await asyncio.sleep(1.0)  # the last acks
    lag.stop()
    # A person who gets no answer within two minutes has been let down: count, not wait.
    missing = await bench.watch.wait_answers([turn for turn, *_ in sent], timeout=120)
    await asyncio.sleep(1.0)
    after = await bench.bot.stats()
    acks, firsts, answers = [], [], []
    for turn, ts, at, envelope_id in sent:
        ack = bench.slack.acks.get(envelope_id)
        if ack is not None:
            acks.append((ack.time - at) * 1000)
        if ts in bench.watch.first_reply:
            firsts.append((bench.watch.first_reply[ts] - at) * 1000)
        if str(turn) in bench.watch.answered:
            answers.append((bench.watch.answered[str(turn)] - at) * 1000)
    label = f"at_{rate:g}_per_s"
    out.add(f"unacked_events_{label}", count - len(acks))
    out.add(f"unanswered_turns_{label}", len(missing))
    out.spread(f"ack_ms_{label}", acks, "ms")
    out.spread(f"peer_loop_lag_ms_{label}", lag.lags, "ms")
    out.add(f"peer_loop_lag_ms_{label}_max", max(lag.lags, default=0.0), "ms")
    out.spread(f"first_reply_ms_{label}", firsts, "ms")
    out.spread(f"answer_ms_{label}", answers, "ms")
    out.add(f"cpu_per_turn_s_r1_{label}", (after["cpu_s"] - before["cpu_s"]) / count, "s")
    out.add("threads_total", bench.next_turn)
    out.add("rss_after_burst_mb", after["rss_kb"] / 1024, "MB")
    out.add("threads_after_burst", after["threads"])


# --- the world -----------------------------------------------------------------------------

# The burst's other channels: #shop-bench-01 … bound like #shop (viewer, namespace shop).
BENCH_CHANNEL_NAMES = "shop-bench-*"


def burst_channels(count: int) -> list[str]:
    """#shop, then `count - 1` channels like it: a burst at 20 mentions a second in a real
    workspace comes from many channels, and Slack paces posting per channel."""
    return [SHOP_CHANNEL, *(f"C0BENCH{index:03d}" for index in range(1, count))]


async def start_peers(channels: int) -> tuple[SlackServer, TimedModel, KubeServer]:
    slack, model, kube = SlackServer(), TimedModel(), KubeServer()
    for peer in (slack, model, kube):
        await peer.start()
    kube.seed_demo()
    # A chatty pod, so each pod_logs round adds a few kB to the conversation, as in real use.
    lines = "".join(
        f"2026-12-03T07:{i // 60:02d}:{i % 60:02d}Z INFO checkout request id={i:06d} "
        f"path=/api/cart/items status=200 latency_ms={i % 97}\n"
        for i in range(400)
    )
    kube.add_pod("shop", LOG_POD, logs=lines)
    slack.set_channel(SHOP_CHANNEL, "shop-oncall")
    for index, channel in enumerate(burst_channels(channels)[1:], start=1):
        slack.set_channel(channel, f"shop-bench-{index:02d}")
    return slack, model, kube


def write_config(
    tmp: Path, slack: SlackServer, model: ModelServer, kube: KubeServer, args: argparse.Namespace
) -> tuple[Path, int]:
    kubeconfig = kube.write_kubeconfig(tmp / "kubeconfig")
    health_port = free_port()
    data = base_config(slack, model, kubeconfig, tmp / "kelpie.db")
    data = merge(
        data,
        {
            "server": {"health": {"port": health_port}},
            "agent": {"max_iterations": 25, "llm_retry_delay_s": 1},
            "models": {"profiles": {"default": {"tier": "high", "client": args.client}}},
        },
    )
    bench_channels = {"match": {"name": BENCH_CHANNEL_NAMES}, "role": "viewer", "namespace": "shop"}
    data["channels"] = [bench_channels, *data["channels"]]
    if args.streaming == "default":
        data["slack"].pop("streaming", None)
    else:
        data["slack"]["streaming"] = args.streaming
    path = tmp / "kelpie.yaml"
    path.write_text(yaml.safe_dump(data))
    return path, health_port


def header(out: Figures, args: argparse.Namespace) -> None:
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    out.add("date", datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"))
    out.add("commit", commit or "unknown")
    out.add("cpus", os.cpu_count())
    out.add("loadavg_1m_before", os.getloadavg()[0])
    out.add("slack_streaming", args.streaming)
    out.add("model_client", args.client)


async def main_async(args: argparse.Namespace) -> int:
    out = Figures()
    header(out, args)
    slack, model, kube = await start_peers(args.channels)
    tmp = Path(tempfile.mkdtemp(prefix="kelpie-bench-"))
    config_path, health_port = write_config(tmp, slack, model, kube, args)
    env = environ(slack)
    if args.profile:
        env["BENCH_PROFILE"] = args.profile
    bot = BotProcess(config_path, env, tmp / "bot.log")
    bench = Bench(slack, model, kube, bot, SlackWatch(slack), out, profile_dir=args.profile_turns)
    try:
        await phase_start(bench, health_port)
        repeats = {1: args.turns_1, 5: args.turns_5, 20: args.turns_20}
        await phase_turns(bench, repeats)
        if args.burst:
            await phase_burst(bench, args.burst, args.rate, args.channels)
        out.add("litellm_loaded_at_end", (await bot.stats())["litellm_loaded"])
    finally:
        out.add("stop_s", await bot.stop(), "s")
        for peer in (slack, model, kube):
            await peer.stop()
    problems = bot.log_problems()
    out.add("bot_log_errors", len(problems))
    for line in dict.fromkeys(problems[:20]):
        print(f"# {line[:200]}", flush=True)
    out.add("loadavg_1m_after", os.getloadavg()[0])
    if args.keep:
        print(f"# bot log and database: {tmp}", flush=True)
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(out.values, indent=2) + "\n")  # noqa: ASYNC240
    return 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--burst", type=int, default=100, help="mentions in the burst phase")
    parser.add_argument("--rate", type=float, default=20.0, help="burst mentions per second")
    parser.add_argument(
        "--channels",
        type=int,
        default=20,
        help="channels the burst's mentions are spread over, in turn (1: all in #shop)",
    )
    parser.add_argument("--turns-1", type=int, default=10, help="1-round turns (first: cold)")
    parser.add_argument("--turns-5", type=int, default=5, help="5-round turns")
    parser.add_argument("--turns-20", type=int, default=5, help="20-round turns")
    parser.add_argument(
        "--streaming",
        default="default",
        choices=["default", "auto", "native", "update"],
        help="slack.streaming (default: the config's own default)",
    )
    parser.add_argument(
        "--client",
        default="auto",
        choices=["auto", "litellm", "openai-compatible"],
        help="the model profile's client (models.profiles.default.client; auto, the "
        "default, is the wire client for the openai/ test model)",
    )
    parser.add_argument("--json", help="also write the figures to this JSON file")
    parser.add_argument(
        "--profile", help="cProfile the bot's main thread into this file (pstats format)"
    )
    parser.add_argument(
        "--profile-turns",
        help="cProfile the first and the tenth 1-round turn on each of the bot's event-loop "
        "threads into this folder (first.<thread>, tenth.<thread>)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the bot's log and database")
    args = parser.parse_args(argv)
    if args.profile:
        args.profile = os.path.abspath(args.profile)  # the bot runs in another directory
    if args.profile_turns:
        os.makedirs(args.profile_turns, exist_ok=True)
        args.profile_turns = os.path.abspath(args.profile_turns)
    return args


def main(argv: list[str] | None = None) -> int:
    return asyncio.run(main_async(parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
