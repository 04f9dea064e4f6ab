"""A real PostgreSQL for the tests: `initdb` into a temporary folder, a free port on
127.0.0.1, one server per test session and a fresh database per test.

The server binaries come from Debian's `postgresql` package (`.ci/run` installs it). When
the tests run as root, the server runs as the `postgres` user, as PostgreSQL requires.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

import asyncpg


def _binaries() -> Path:
    if "KELPIE_PG_BIN" in os.environ:
        return Path(os.environ["KELPIE_PG_BIN"])
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: p.parts)
    return found[-1].parent if found else Path("/usr/lib/postgresql/15/bin")


BIN = _binaries()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class PostgresServer:
    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="kelpie-pg-"))
        self.data = self.root / "data"
        self.port = free_port()
        self._user = _server_user()

    def _run(self, *args: str) -> None:
        command = [str(BIN / args[0]), *args[1:]]
        if self._user is not None:
            command = ["runuser", "-u", self._user, "--", *command]
        subprocess.run(command, check=True, capture_output=True, timeout=60)

    def start(self) -> None:
        if not (BIN / "initdb").exists():
            raise RuntimeError(f"PostgreSQL server binaries not found in {BIN}")
        if self._user is not None:
            shutil.chown(self.root, self._user)
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8")
        self.resume()

    def stop(self) -> None:
        try:
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def pause(self) -> None:
        """Stop the server (as an outage would); `resume` starts it again, data kept."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def resume(self) -> None:
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.root} "
            # Test speed only: the tests never pull the plug on the machine.
            "-c fsync=off -c full_page_writes=off"
        )
        log = str(self.root / "log")
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", log, "-w", "start")

    def url(self, database: str) -> str:
        return f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/{database}"

    async def new_database(self) -> str:
        """A fresh, empty database; returns its URL."""
        name = f"kelpie_{uuid.uuid4().hex[:12]}"
        connection = await asyncpg.connect(
            host="127.0.0.1", port=self.port, user="postgres", database="postgres"
        )
        try:
            await connection.execute(f'CREATE DATABASE "{name}"')
        finally:
            await connection.close()
        return self.url(name)


def _server_user() -> str | None:
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam("postgres").pw_name
    except KeyError:
        return None
