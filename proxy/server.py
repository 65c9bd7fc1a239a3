"""Serve the app with uvicorn (uvloop + httptools) and drain gracefully on SIGTERM/SIGINT.

On a stop signal the proxy reports not-ready at once, stops accepting connections, lets
in-flight requests finish for up to ``shutdown_timeout`` seconds, then exits. Metrics are
served on a listener of their own (see :mod:`proxy.metrics_listener`), up as long as the server.
"""

from __future__ import annotations

import importlib.util
import math
import socket
from types import FrameType

import uvicorn

from proxy.app import create_app
from proxy.metrics import Metrics
from proxy.metrics_listener import MetricsListener
from proxy.routes import Readiness
from proxy.settings import Settings

__all__ = ["DrainingServer", "build_server"]


class DrainingServer(uvicorn.Server):
    """uvicorn's server, flagging readiness as draining the moment a stop signal arrives."""

    def __init__(self, config: uvicorn.Config, readiness: Readiness, metrics: MetricsListener) -> None:
        super().__init__(config)
        self.readiness = readiness
        self.metrics = metrics

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self.metrics.start()
        try:
            await super().serve(sockets)
        finally:
            self.metrics.stop()

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.readiness.draining = True
        super().handle_exit(sig, frame)
        # uvicorn re-raises the signal after draining, so the process would die "killed by
        # SIGTERM"; a completed graceful drain is a clean exit.
        captured = getattr(self, "_captured_signals", None)
        if isinstance(captured, list):
            captured.clear()


def build_server(settings: Settings, readiness: Readiness | None = None) -> DrainingServer:
    """A ready-to-run server for ``settings``; tests run it in a thread, the CLI in main."""
    ready = readiness or Readiness()
    series = Metrics()
    app = create_app(settings, readiness=ready, metrics=series)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        loop="uvloop" if importlib.util.find_spec("uvloop") else "asyncio",
        http="httptools" if importlib.util.find_spec("httptools") else "h11",
        lifespan="on",
        access_log=False,
        log_config=None,
        server_header=False,
        proxy_headers=False,
        date_header=False,
        timeout_graceful_shutdown=math.ceil(settings.shutdown_timeout),
        timeout_keep_alive=75,
    )
    return DrainingServer(config, ready, MetricsListener(series, settings.metrics_host, settings.metrics_port))
