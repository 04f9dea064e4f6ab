"""The bot under measurement: `kelpie run` exactly as production starts it, plus counters.

`bench/run.py` starts this file as a subprocess so the bot's CPU, memory and start-up are
its own, not the peers'. Before the bot is imported it registers SQLAlchemy listeners that
count commits and statements on every engine. A daemon thread answers `stats` lines on
stdin with one JSON line on the original stdout; everything else the process prints goes
to stderr (the log file), so the control channel stays clean.
"""

from __future__ import annotations

import asyncio
import cProfile
import json
import os
import sys
import threading
import time
import weakref
from pathlib import Path
from typing import Any, ClassVar, TextIO

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from sqlalchemy import event  # noqa: E402
from sqlalchemy.engine import Engine  # noqa: E402

COUNTS = {"commits": 0, "statements": 0}


@event.listens_for(Engine, "commit")
def _on_commit(_connection: Any) -> None:
    COUNTS["commits"] += 1


@event.listens_for(Engine, "before_cursor_execute")
def _on_statement(*_args: Any) -> None:
    COUNTS["statements"] += 1


def _rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


_SEEN_MODULES: set[str] = set()


def _new_modules() -> list[str]:
    """Modules imported since the previous `stats` (what a phase loaded lazily)."""
    now = set(sys.modules)
    new = sorted(now - _SEEN_MODULES) if _SEEN_MODULES else []
    _SEEN_MODULES.update(now)
    return new


class _Loops(asyncio.DefaultEventLoopPolicy):
    """Remembers every event loop the bot makes (its own, LiteLLM's thread), so one turn
    can be profiled on each of their threads (`profile` / `profile-stop` on stdin)."""

    made: ClassVar[weakref.WeakSet[asyncio.AbstractEventLoop]] = weakref.WeakSet()

    def new_event_loop(self) -> asyncio.AbstractEventLoop:
        loop = super().new_event_loop()
        self.made.add(loop)
        return loop


class _TurnProfile:
    """cProfile on every running loop's thread, from `profile` until `profile-stop PATH`
    (one pstats file per thread: PATH.<thread name>)."""

    def __init__(self) -> None:
        self._running: list[tuple[asyncio.AbstractEventLoop, cProfile.Profile, list[str]]] = []

    def start(self) -> None:
        for loop in list(_Loops.made):
            if loop.is_running():
                # CPU of that thread only: what a turn waits for (I/O, the GIL) is not its cost.
                profiler, name = cProfile.Profile(time.thread_time), []
                loop.call_soon_threadsafe(self._enable, profiler, name)
                self._running.append((loop, profiler, name))

    @staticmethod
    def _enable(profiler: cProfile.Profile, name: list[str]) -> None:
        name.append(threading.current_thread().name)
        profiler.enable()

    def stop(self, path: str) -> list[str]:
        done = []
        for loop, profiler, name in self._running:
            finished = threading.Event()

            def disable(
                profiler: cProfile.Profile = profiler, finished: threading.Event = finished
            ) -> None:
                profiler.disable()
                finished.set()

            loop.call_soon_threadsafe(disable)
            finished.wait(10)
            profiler.dump_stats(f"{path}.{name[0]}")
            done.append(f"{path}.{name[0]}")
        self._running = []
        return done


def _answer_stats(control: TextIO) -> None:
    turn_profile = _TurnProfile()
    for line in sys.stdin:
        command, _, argument = line.strip().partition(" ")
        if command == "profile":
            turn_profile.start()
            control.write(json.dumps({"profiling": True}) + "\n")
            control.flush()
        elif command == "profile-stop":
            control.write(json.dumps({"written": turn_profile.stop(argument)}) + "\n")
            control.flush()
        elif command == "stats":
            stats = {
                **COUNTS,
                "cpu_s": time.process_time(),
                "rss_kb": _rss_kb(),
                "threads": threading.active_count(),
                "modules": len(sys.modules),
                "new_modules": _new_modules(),
                "litellm_loaded": "litellm" in sys.modules,
            }
            control.write(json.dumps(stats) + "\n")
            control.flush()


def main() -> int:
    control = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # stray prints go to the log, never into the control channel
    asyncio.set_event_loop_policy(_Loops())
    threading.Thread(target=_answer_stats, args=(control,), daemon=True).start()
    from bot.cli import main as kelpie

    profile_path = os.environ.get("BENCH_PROFILE")
    if not profile_path:
        return kelpie(["run", "--config", sys.argv[1]])
    import cProfile

    # The event loop's thread only: what keeps the loop busy is what delays everything.
    profiler = cProfile.Profile()
    try:
        return profiler.runcall(kelpie, ["run", "--config", sys.argv[1]])
    finally:
        profiler.dump_stats(profile_path)


if __name__ == "__main__":
    sys.exit(main())
