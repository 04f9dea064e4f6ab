"""One MCP server, as kelpie keeps it: connected, its tool list read, reconnected after a
failure, re-listed when it says its tools changed (or every `relist_s`).

The SDK's client is an async context manager that must be left in the task that entered it,
so each server has one owner task holding the connection open; calls from turns go through
it. A server that is down, slow or answers an error leaves one sentence (`problem`), is
offered no tools and is tried again after a growing pause. This module knows no pipeline:
it hands out what the server lists and what a call answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TextIO

import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import CONNECTION_CLOSED, CallToolResult, ToolListChangedNotification

from bot.config import McpServerConfig, McpTransport
from bot.errors import KelpieError
from bot.model.outbound import mask_text
from bot.toolsets.spec import ToolFailure

log = logging.getLogger(__name__)

# Pauses between attempts to reach a server that is down (seconds, the last one repeated).
RECONNECT_DELAYS = (1.0, 2.0, 5.0, 15.0, 30.0)
# At most this many pages of a tool list are read (a server that never ends its list).
_MAX_PAGES = 20


class ServerState(StrEnum):
    CONNECTING = "connecting"
    UP = "up"
    DOWN = "down"
    CLOSED = "closed"


@dataclass(frozen=True)
class ListedTool:
    """One tool as the server lists it (its hints are shown, never trusted)."""

    name: str
    description: str
    input_schema: dict[str, Any]
    hints: tuple[str, ...] = ()


class McpConnection:
    """One configured server. `start` waits for the first attempt (at most `timeout_s`);
    `call` runs one tool; `on_change` is called whenever the tool list was read anew."""

    def __init__(
        self,
        name: str,
        config: McpServerConfig,
        values: Callable[[], dict[str, str]],
        on_change: Callable[[], None] = lambda: None,
        delays: tuple[float, ...] = RECONNECT_DELAYS,
    ) -> None:
        self.name = name
        self._config = config
        # The headers (HTTP) or process variables (stdio), read from the environment at
        # each attempt: a variable set later is picked up by the next reconnection.
        self._values = values
        self._on_change = on_change
        self._delays = delays
        self.state = ServerState.CONNECTING
        self.problem: str | None = None
        self.tools: tuple[ListedTool, ...] = ()
        self._client: Client | None = None
        self._attempted = asyncio.Event()
        self._wake = asyncio.Event()  # a list change, a lost connection or close
        self._lost = False
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Start the owner task; return once it connected or failed once (or timed out)."""
        if self._task is None:
            self._task = asyncio.create_task(self._own(), name=f"kelpie-mcp-{self.name}")
        timeout = self._config.timeout_s
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._attempted.wait(), timeout)
        if self.state is ServerState.CONNECTING:
            self._down(f"MCP server {self.name} did not answer within {timeout:g} s")

    async def close(self) -> None:
        self.state = ServerState.CLOSED
        self._wake.set()
        task, self._task = self._task, None
        if task is None:
            return
        try:
            await asyncio.wait_for(asyncio.shield(task), self._config.timeout_s)
        except (TimeoutError, Exception):
            task.cancel()
            with contextlib.suppress(BaseException):
                await task

    async def call(self, tool: str, arguments: dict[str, Any]) -> CallToolResult:
        """The server's answer to one call; ToolFailure with one sentence when it is down,
        too slow or the connection broke."""
        client = self._client
        if client is None or self.state is not ServerState.UP:
            raise ToolFailure(self.problem or f"MCP server {self.name} is not connected")
        timeout = self._config.timeout_s
        try:
            # The client's own read timeout is the same (`_connected`): this one says which.
            return await asyncio.wait_for(client.call_tool(tool, arguments), timeout)
        except TimeoutError:
            raise ToolFailure(
                f"MCP server {self.name} did not answer {tool} within {timeout:g} s"
            ) from None
        except MCPError as error:
            if _connection_lost(error):
                self._lose()
                raise ToolFailure(
                    f"MCP server {self.name} dropped the connection during {tool}"
                ) from None
            raise ToolFailure(
                f"MCP server {self.name} refused {tool}: {error.error.message}"
            ) from None
        except Exception as error:
            log.warning("MCP server %s failed during %s", self.name, tool, exc_info=True)
            self._lose()
            raise ToolFailure(
                f"MCP server {self.name} failed during {tool} ({type(error).__name__})"
            ) from None

    # --- the owner task -----------------------------------------------------------------

    async def _own(self) -> None:
        failures = 0
        while self.state is not ServerState.CLOSED:
            try:
                await self._session()
                failures = 0
            except BaseException as error:  # the SDK raises exception groups
                if isinstance(error, asyncio.CancelledError):
                    raise
                self._down(_sentence(self.name, error))
                failures += 1
            finally:
                self._client = None
                self._attempted.set()
            if self.state is ServerState.CLOSED:
                break
            delay = self._delays[min(failures, len(self._delays)) - 1] if failures else 0
            await self._pause(delay)

    async def _session(self) -> None:
        self._lost = False
        async with self._connected() as client:
            await self._relist(client)
            self._client = client
            self.state, self.problem = ServerState.UP, None
            log.info("MCP server %s: connected, %d tool(s)", self.name, len(self.tools))
            self._attempted.set()
            listener = asyncio.create_task(self._listen(client))
            try:
                await self._serve(client)
            finally:
                listener.cancel()
                with contextlib.suppress(BaseException):
                    await listener

    async def _serve(self, client: Client) -> None:
        """Re-list on each change event or every `relist_s`, until lost or closed."""
        while self.state is not ServerState.CLOSED:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._config.relist_s)
            self._wake.clear()
            if self.state is ServerState.CLOSED:
                return
            if self._lost:
                raise ConnectionError("the connection was lost during a call")
            await self._relist(client)

    async def _relist(self, client: Client) -> None:
        listed: list[ListedTool] = []
        cursor: str | None = None
        for _ in range(_MAX_PAGES):
            page = await asyncio.wait_for(
                client.list_tools(cursor=cursor, cache_mode="refresh"), self._config.timeout_s
            )
            listed += [_listed(tool) for tool in page.tools]
            cursor = page.next_cursor
            if cursor is None:
                break
        if tuple(listed) != self.tools:
            self.tools = tuple(listed)
            self._on_change()

    async def _listen(self, client: Client) -> None:
        """Wake the owner task on each list-changed event (2026-07-28 servers)."""
        tools = client.server_capabilities.tools
        if tools is None or not tools.list_changed:
            return
        try:
            async with client.listen(tools_list_changed=True) as events:
                async for _ in events:
                    self._wake.set()
        except Exception:
            # An older server sends the notification itself (`_notified`); a periodic
            # re-list catches whatever is missed.
            log.info("MCP server %s: no list-changed stream", self.name, exc_info=True)

    async def _notified(self, message: Any) -> None:
        if isinstance(message, ToolListChangedNotification):
            self._wake.set()

    @contextlib.asynccontextmanager
    async def _connected(self) -> AsyncIterator[Client]:
        """A connected client: over HTTP with the configured headers, or to a process
        started with the configured variables, its stderr logged line by line, masked."""
        values = self._values()
        timeout = self._config.timeout_s
        async with contextlib.AsyncExitStack() as stack:
            server: Any
            if self._config.transport is McpTransport.HTTP:
                assert self._config.url is not None
                http = create_mcp_http_client(
                    headers=values, timeout=httpx2.Timeout(timeout, read=max(timeout, 300.0))
                )
                await stack.enter_async_context(http)
                server = streamable_http_client(self._config.url, http_client=http)
            else:
                assert self._config.command is not None
                params = StdioServerParameters(
                    command=self._config.command, args=list(self._config.args), env=values
                )
                server = stdio_client(params, errlog=stack.enter_context(_StderrLog(self.name)))
            client = Client(server, read_timeout_seconds=timeout, message_handler=self._notified)
            yield await stack.enter_async_context(client)

    async def _pause(self, delay: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), delay)
        self._wake.clear()

    def _down(self, sentence: str) -> None:
        if self.state is ServerState.CLOSED:
            return
        if self.problem != sentence:
            log.warning("%s; kelpie goes on without it and tries again", sentence)
        changed = bool(self.tools)
        self.state, self.problem, self.tools = ServerState.DOWN, sentence, ()
        if changed:
            self._on_change()

    def _lose(self) -> None:
        """A call saw the connection break: no call uses it any more; the owner task
        connects again."""
        if self.state is ServerState.CLOSED:
            return
        self._lost = True
        self._client = None
        self.state = ServerState.CONNECTING
        self.problem = f"MCP server {self.name} is reconnecting after a lost connection"
        self._wake.set()


def _listed(tool: Any) -> ListedTool:
    hints = tool.annotations
    shown = (
        ()
        if hints is None
        else tuple(
            label
            for label, value in (
                ("read-only", hints.read_only_hint),
                ("destructive", hints.destructive_hint),
                ("idempotent", hints.idempotent_hint),
            )
            if value
        )
    )
    return ListedTool(tool.name, tool.description or "", dict(tool.input_schema or {}), shown)


def _connection_lost(error: MCPError) -> bool:
    return error.code == CONNECTION_CLOSED


def _sentence(name: str, error: BaseException) -> str:
    """One sentence for a failed attempt (the details go to the log)."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    log.debug("MCP server %s: attempt failed", name, exc_info=error)
    if isinstance(error, KelpieError):
        return f"MCP server {name} cannot be used: {error}"
    if isinstance(error, TimeoutError):
        return f"MCP server {name} did not answer in time"
    if isinstance(error, MCPError):
        return f"MCP server {name} answered an error: {error.error.message}"
    if isinstance(error, OSError | httpx2.HTTPError | ConnectionError):
        return f"MCP server {name} is unreachable ({type(error).__name__})"
    return f"MCP server {name} failed ({type(error).__name__})"


class _StderrLog:
    """A pipe for a stdio server's stderr, read by a thread that logs each line masked (a
    server printing its own credentials must not put them in kelpie's log unmasked)."""

    def __init__(self, name: str) -> None:
        self._name = name
        read, write = os.pipe()
        self._reader = os.fdopen(read, "r", encoding="utf-8", errors="replace")
        self._writer = os.fdopen(write, "w", encoding="utf-8")
        self._thread = threading.Thread(target=self._log, name=f"mcp-{name}-stderr", daemon=True)

    def __enter__(self) -> TextIO:
        self._thread.start()
        return self._writer

    def __exit__(self, *exc: object) -> None:
        # The process holds its own copy: the thread ends when that closes too.
        self._writer.close()

    def _log(self) -> None:
        with self._reader:
            for line in self._reader:
                masked, _ = mask_text(line.rstrip())
                log.info("MCP server %s: %s", self._name, masked)
