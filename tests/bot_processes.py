"""`kelpie run` as real subprocesses against the test world's peers: started on the world's
config merged with a test's overrides, frozen (SIGSTOP) or killed (SIGKILL) on request, and
always killed when the test ends. Shared by every test that kills kelpie mid-flight."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import yaml

from tests.world import World, environ, merge

REPO = Path(__file__).resolve().parents[1]
EVENTS_PATH = "/slack/events"


class BotProcess:
    """`python -m bot.cli run` with the world's config; killed with SIGKILL on request."""

    def __init__(self, world: World, config_path: Path) -> None:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "PYTHONPATH": str(REPO),
            **environ(world.slack),
        }
        self._log = open(config_path.parent / "bot.log", "ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bot.cli", "run", "--config", str(config_path)],
            env=env,
            cwd=config_path.parent,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def freeze(self) -> None:
        """SIGSTOP: the process hangs (holding its leases and connections) until killed."""
        os.kill(self.process.pid, signal.SIGSTOP)

    def kill(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)
        self._log.close()


Start = Callable[[], Awaitable[BotProcess]]


class Launcher:
    """`launch(override)` writes the config and returns `start`, which starts one more
    replica on it and returns once it is connected: in Socket Mode, once the sockets of
    those killed before are gone and its own is open; in HTTP mode, once it listens on
    `events_url` (a port chosen here: every restart listens on the same one)."""

    def __init__(self, world: World, tmp_path: Path) -> None:
        self._world = world
        self._tmp_path = tmp_path
        self._started: list[BotProcess] = []
        self.events_url = ""

    def __call__(self, override: dict[str, Any] | None = None) -> Start:
        config = merge(self._world.config_data, override or {})
        http = config["slack"]["mode"] == "http"
        if http:
            port = free_port()
            config = merge(config, {"slack": {"http": {"port": port, "path": EVENTS_PATH}}})
            self.events_url = f"http://127.0.0.1:{port}{EVENTS_PATH}"
        config_path = self._tmp_path / "kelpie.yaml"
        config_path.write_text(yaml.safe_dump(config))

        async def start() -> BotProcess:
            if http:
                return await self._start_listening(config_path, port)
            return await self._start_connected(config_path)

        return start

    async def _start_connected(self, config_path: Path) -> BotProcess:
        # A killed process's socket may linger a moment: wait until it is gone.
        slack = self._world.slack
        live = sum(bot.process.poll() is None for bot in self._started)
        await slack.wait_for(lambda s: s.connection_count == live, timeout=20)
        bot = self._start(config_path)
        await slack.wait_connected(count=live + 1, timeout=60)
        return bot

    async def _start_listening(self, config_path: Path, port: int) -> BotProcess:
        bot = self._start(config_path)
        for _ in range(600):  # a fresh process imports its libraries first: a ceiling
            assert bot.process.poll() is None, "kelpie exited before it listened"
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                await asyncio.sleep(0.1)
                continue
            writer.close()
            await writer.wait_closed()
            return bot
        raise AssertionError(f"kelpie never listened on port {port}")

    def _start(self, config_path: Path) -> BotProcess:
        bot = BotProcess(self._world, config_path)
        self._started.append(bot)
        return bot

    def log_tail(self, lines: int = 300) -> str:
        """The end of what every process started here logged (they share one file)."""
        path = self._tmp_path / "bot.log"
        if not path.exists():
            return "(nothing logged)"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def kill_all(self) -> None:
        for bot in self._started:
            bot.kill()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
