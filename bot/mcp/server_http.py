"""kelpie's MCP server on the wire: streamable HTTP at `/mcp` (uvicorn inside kelpie's
event loop, stateless) and stdio (`kelpie mcp serve --stdio`).

HTTP: every request must carry `Authorization: Bearer <token>` of a configured client;
without one, or with an unknown one, it is answered 401 with a JSON-RPC error (which the
SDK's client raises as an MCP error) before the SDK sees it. The handlers authenticate the
same header again, so no path reaches a tool without a caller. stdio: the process's
`KELPIE_MCP_TOKEN` names the caller; without a valid one every request is an MCP error.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
from collections.abc import Iterator
from typing import Any

import uvicorn
from mcp.server.context import ServerRequestContext
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from starlette.types import ASGIApp, Receive, Scope, Send

import bot.mcp.server_copy as copy
from bot.mcp.server import UNAUTHORIZED, Count, Identify, McpToolbox, mcp_server
from bot.mcp.server_access import McpCaller, McpCallers

log = logging.getLogger(__name__)

MCP_PATH = "/mcp"


def bearer(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header (None: no such header)."""
    scheme, _, token = (authorization or "").partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


def header_identity(callers: McpCallers) -> Identify:
    def identify(ctx: ServerRequestContext[Any, Any]) -> McpCaller:
        headers = getattr(ctx.request, "headers", None)
        token = bearer(headers.get("authorization") if headers is not None else None)
        caller = callers.authenticate(token)
        if caller is None:
            raise MCPError(UNAUTHORIZED, copy.WRONG_TOKEN if token else copy.NO_TOKEN)
        return caller

    return identify


def fixed_identity(caller: McpCaller | None) -> Identify:
    def identify(ctx: ServerRequestContext[Any, Any]) -> McpCaller:
        if caller is None:
            raise MCPError(UNAUTHORIZED, copy.STDIO_NO_TOKEN)
        return caller

    return identify


class BearerGate:
    """ASGI middleware: only requests with a configured client's token reach the app."""

    def __init__(self, app: ASGIApp, callers: McpCallers, count: Count) -> None:
        self._app = app
        self._callers = callers
        self._count = count

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        token = bearer(headers.get(b"authorization", b"").decode("latin-1") or None)
        caller = self._callers.authenticate(token)
        if caller is None:
            log.info("MCP request refused: %s token", "wrong" if token else "no")
            self._count("", "unauthorized")
            await _unauthorized(send, copy.WRONG_TOKEN if token else copy.NO_TOKEN)
            return
        await self._app(scope, receive, send)


async def _unauthorized(send: Send, message: str) -> None:
    body = json.dumps(
        {"jsonrpc": "2.0", "id": None, "error": {"code": UNAUTHORIZED, "message": message}}
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"application/json"),
                (b"www-authenticate", b'Bearer realm="kelpie"'),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class _Embedded(uvicorn.Server):
    """uvicorn inside kelpie's event loop: kelpie owns SIGINT and SIGTERM (uvicorn's own
    `serve` would take them over and hand them back only when it stops)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class McpHttp:
    """The streamable HTTP listener, served by uvicorn on the running event loop."""

    def __init__(self, toolbox: McpToolbox, callers: McpCallers, count: Count) -> None:
        self._toolbox = toolbox
        self._callers = callers
        self._count = count
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self, host: str, port: int) -> int:
        """Listen; returns the bound port (0 in the config: a free one). The socket is
        bound here, so a port taken raises OSError now; a request arriving before the
        server is up waits in the socket's backlog."""
        app = mcp_server(self._toolbox, header_identity(self._callers)).streamable_http_app(
            streamable_http_path=MCP_PATH, stateless_http=True, json_response=True, host=host
        )
        config = uvicorn.Config(
            BearerGate(app, self._callers, self._count),
            host=host,
            port=port,
            lifespan="on",
            log_config=None,
            access_log=False,
        )
        listening = _listening(host, port)
        bound: int = listening.getsockname()[1]
        self._server = _Embedded(config)
        self._task = asyncio.create_task(self._server.serve([listening]), name="mcp-server")
        log.info("serving MCP on %s:%s%s", host, bound, MCP_PATH)
        return bound

    async def stop(self) -> None:
        if self._server is None or self._task is None:
            return
        self._server.should_exit = True
        try:
            await self._task
        except Exception:
            log.exception("the MCP server stopped with an error")


def _listening(host: str, port: int) -> socket.socket:
    """A socket bound and listening now (uvicorn's own binding exits the process when the
    port is taken)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


async def serve_stdio(toolbox: McpToolbox, caller: McpCaller | None) -> None:
    """MCP over this process's stdin/stdout until the client closes it."""
    server = mcp_server(toolbox, fixed_identity(caller))
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())
