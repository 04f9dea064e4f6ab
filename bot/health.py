"""`/healthz` (the process is up), `/readyz` (started: store, model library and Slack
ready, and still connected) for Kubernetes probes, and `/metrics` for Prometheus."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

log = logging.getLogger(__name__)

# Returns None when ready, else one sentence saying what is not.
ReadinessCheck = Callable[[], Awaitable[str | None]]
# The Prometheus text exposition of the process's metrics.
MetricsText = Callable[[], bytes]
PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"


async def serve(app: web.Application, host: str, port: int) -> tuple[web.AppRunner, int]:
    """Start an aiohttp app; returns its runner and the port it got (port 0: any free one)."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    sockets = getattr(site._server, "sockets", None) or []
    return runner, sockets[0].getsockname()[1] if sockets else port


def health_app(ready: ReadinessCheck, metrics: MetricsText) -> web.Application:
    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(_: web.Request) -> web.Response:
        try:
            problem = await ready()
        except Exception as error:  # a check that crashes is "not ready", never a 500 page
            log.warning("readiness check failed: %s", type(error).__name__)
            problem = f"readiness check failed ({type(error).__name__})"
        if problem:
            return web.Response(status=503, text=f"not ready: {problem}\n")
        return web.Response(text="ready\n")

    async def metrics_page(_: web.Request) -> web.Response:
        return web.Response(body=metrics(), headers={"Content-Type": PROMETHEUS_TEXT})

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics_page)
    return app
