"""MCP servers written with the SDK's own server (`MCPServer`), for kelpie's MCP client.

Run as a process: `python -m tests.peers.mcp_servers stdio` (stdin/stdout) or
`python -m tests.peers.mcp_servers http PORT` (streamable HTTP on 127.0.0.1:PORT/mcp).
Every call a tool receives is appended, as one JSON line, to the file `MCP_PEER_LOG` names,
so a test asserts what the server was really asked. The tools:

- `get_dashboard` (a read): its answer carries a planted secret (the masker must hide it),
  and the `Authorization` header the server saw (HTTP), or the `GRAFANA_TOKEN` variable
  the process got (stdio): both must be what kelpie was configured to send;
- `search`, `list_pods` (reads; `list_pods` has a namespace argument), `get_latency`
  (structured content);
- `create_annotation` (claims `readOnlyHint`, configured as a write in the tests);
- `slow` (answers after `MCP_PEER_SLOW_S`, longer than any test's timeout);
- `crash` (the process dies mid-call);
- `failing` (the tool's own error: `isError`);
- `grow` (adds the tool `grown` and tells listeners the list changed).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations

from tests.postgres import free_port

# What the masker recognises (an AWS access key id), planted in a read's answer.
PLANTED = "AKIAIOSFODNN7EXAMPL3"


def _record(tool: str, args: dict[str, Any], seen: str | None = None) -> None:
    path = os.environ.get("MCP_PEER_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as log:
            log.write(json.dumps({"tool": tool, "args": args, "seen": seen}) + "\n")


def _credential(ctx: Context) -> str | None:
    """What the server was given to authenticate kelpie: a header (HTTP) or a variable."""
    headers = ctx.headers
    if headers is not None:
        return headers.get("authorization")
    return os.environ.get("GRAFANA_TOKEN")


def build() -> MCPServer:
    server = MCPServer("grafana-peer")

    @server.tool(description="A dashboard by uid.")
    def get_dashboard(uid: str, ctx: Context) -> str:
        seen = _credential(ctx)
        _record("get_dashboard", {"uid": uid}, seen)
        print(f"debug: fetched {uid} with key {PLANTED}", file=sys.stderr, flush=True)
        return f"dashboard {uid}: 3 panels, datasource key {PLANTED}"

    @server.tool(description="Search dashboards.")
    def search(query: str) -> str:
        _record("search", {"query": query})
        return f"found 1 dashboard for {query}"

    @server.tool(description="Pods of a namespace.")
    def list_pods(namespace: str) -> str:
        _record("list_pods", {"namespace": namespace})
        return f"pods in {namespace}: web-0"

    @server.tool(description="Latency of a service.")
    def get_latency(service: str) -> dict[str, Any]:
        _record("get_latency", {"service": service})
        return {"service": service, "p95_ms": 120}

    @server.tool(
        description="Annotate a dashboard.",
        annotations=ToolAnnotations(read_only_hint=True),
    )
    def create_annotation(dashboard: str, text: str) -> str:
        _record("create_annotation", {"dashboard": dashboard, "text": text})
        return f"annotated {dashboard}"

    @server.tool(description="Answers slowly.")
    async def slow() -> str:
        _record("slow", {})
        await asyncio.sleep(float(os.environ.get("MCP_PEER_SLOW_S", "3600")))
        return "late"

    @server.tool(description="The server process dies mid-call.")
    def crash() -> str:
        _record("crash", {})
        os._exit(3)

    @server.tool(description="Always fails.")
    def failing() -> str:
        _record("failing", {})
        raise ValueError("the backend refused")

    @server.tool(description="Adds a tool.")
    async def grow(ctx: Context) -> str:
        _record("grow", {})
        server.add_tool(_grown, name="grown", description="A tool added while running.")
        await ctx.notify_tools_changed()
        return "grown"

    return server


def _grown() -> str:
    _record("grown", {})
    return "I am new"


class PeerLog:
    """The MCP peer's record of every call it received."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def calls(self, tool: str | None = None) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        found = [json.loads(line) for line in self.path.read_text().splitlines()]
        return [call for call in found if tool is None or call["tool"] == tool]


class HttpPeer:
    """The peer as a streamable HTTP server process on 127.0.0.1."""

    def __init__(self, log: Path, port: int | None = None) -> None:
        self.port = port or free_port()
        self.log = PeerLog(log)
        self._process: subprocess.Popen[str] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self) -> None:
        """Returns once the server listens: it says so on stdout, after binding its port."""
        env = {"MCP_PEER_LOG": str(self.log.path), "PATH": "/usr/bin:/bin"}
        self._process = subprocess.Popen(
            [sys.executable, "-m", "tests.peers.mcp_servers", "http", str(self.port)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self._process.stdout is not None
        said = self._process.stdout.readline()
        assert said.strip() == f"listening on {self.port}", "the MCP peer did not start"

    def stop(self) -> None:
        if self._process is not None:
            self._process.terminate()
            self._process.wait(timeout=10)


def main(argv: list[str]) -> None:
    server = build()
    if argv[0] == "stdio":
        asyncio.run(server.run_stdio_async())
        return
    # Bound before it says so: whoever reads the line may connect at once.
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", int(argv[1])))
    listener.listen()
    config = uvicorn.Config(server.streamable_http_app(), log_level="warning")
    print(f"listening on {listener.getsockname()[1]}", flush=True)
    asyncio.run(uvicorn.Server(config).serve(sockets=[listener]))


if __name__ == "__main__":
    main(sys.argv[1:])
