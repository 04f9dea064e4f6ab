"""An HTTP proxy in front of a real server (the real Alertmanager) that can hold the answer
to a request after the server handled it: the change is made, but the client does not hear
so, as when kelpie is killed between a write and its recorded outcome."""

from __future__ import annotations

import asyncio
import re

import aiohttp
from aiohttp import web

from tests.postgres import free_port

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}


class HoldingProxy:
    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.port = free_port()
        self._held: list[tuple[str, re.Pattern[str], asyncio.Event]] = []
        self._runner: web.AppRunner | None = None
        self._client: aiohttp.ClientSession | None = None
        # (method, path) of every request that reached the upstream.
        self.forwarded: list[tuple[str, str]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def hold_answer(self, method: str, path: str) -> asyncio.Event:
        """Requests `method` on a path matching `path` reach the upstream; their answers
        wait until the returned event is set."""
        released = asyncio.Event()
        self._held.append((method, re.compile(path), released))
        return released

    async def start(self) -> None:
        self._client = aiohttp.ClientSession()
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def stop(self) -> None:
        for _, _, released in self._held:
            released.set()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._client is not None:
            await self._client.close()

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        assert self._client is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        async with self._client.request(
            request.method,
            self.upstream + request.path_qs,
            data=await request.read(),
            headers=headers,
        ) as answer:
            body = await answer.read()
            status, content_type = answer.status, answer.content_type
        self.forwarded.append((request.method, request.path))
        for method, path, released in self._held:
            if method == request.method and path.search(request.path):
                await released.wait()
        return web.Response(body=body, status=status, content_type=content_type)
