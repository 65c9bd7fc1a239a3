"""Serve the app with uvicorn (uvloop + httptools) and drain gracefully on SIGTERM/SIGINT.

Connections go through :mod:`proxy.edge.connections`: every request is answered or closed,
and a request head slower than ``header_timeout`` closes its connection.

On a stop signal the proxy reports not-ready at once, stops accepting connections, lets
in-flight requests finish for up to ``shutdown_timeout`` seconds, then exits. Metrics are
served on a listener of their own (see :mod:`proxy.edge.metrics_listener`), up as long as the server.

With ``reuse_port`` the API socket is bound here with ``SO_REUSEPORT`` (and the metrics
listener likewise), so several independent ``loopwarden serve`` processes share one port and
the kernel spreads new connections over them: one event loop per core. They share state
through Redis and metrics through ``PROMETHEUS_MULTIPROC_DIR``; each drains on its own.
"""

from __future__ import annotations

import asyncio
import importlib.util
import math
import os
import socket
from types import FrameType

import uvicorn
from prometheus_client import multiprocess

from proxy.edge.app import create_app
from proxy.edge.connections import GuardedHttpProtocol, guarded_websocket_protocol
from proxy.edge.console import Console
from proxy.edge.dispatch import GuardedFirst
from proxy.edge.metrics_listener import MetricsListener
from proxy.edge.routes import Readiness
from proxy.observe.metrics import Metrics
from proxy.settings import Settings

__all__ = ["DrainingServer", "build_server"]


class DrainingServer(uvicorn.Server):
    """uvicorn's server, flagging readiness as draining the moment a stop signal arrives."""

    def __init__(
        self,
        config: uvicorn.Config,
        readiness: Readiness,
        metrics: MetricsListener,
        sockets: list[socket.socket] | None = None,
    ) -> None:
        super().__init__(config)
        self.readiness = readiness
        self.metrics = metrics
        self._sockets = sockets

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self.metrics.start(asyncio.get_running_loop())
        try:
            await super().serve(sockets or self._sockets)
        finally:
            self.metrics.stop()
            if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
                multiprocess.mark_process_dead(os.getpid())  # type: ignore[no-untyped-call]

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
        GuardedFirst(app, app.state.guarded_routes),
        host=settings.host,
        port=settings.port,
        loop="uvloop" if importlib.util.find_spec("uvloop") else "asyncio",
        http=GuardedHttpProtocol.with_header_timeout(settings.header_timeout),
        ws=guarded_websocket_protocol() or "none",
        lifespan="on",
        access_log=False,
        log_config=None,
        server_header=False,
        proxy_headers=False,
        date_header=False,
        timeout_graceful_shutdown=math.ceil(settings.shutdown_timeout),
        timeout_keep_alive=75,
    )
    secret = settings.console_secret.get_secret_value().encode() if settings.console_secret else None
    console = Console(
        app.state.console,
        settings.console_admin_key_sha256,
        secret=secret,
        secure_cookie=settings.console_cookie_secure,
    )
    listener = MetricsListener(
        series, settings.metrics_host, settings.metrics_port, reuse_port=settings.reuse_port, console=console
    )
    sockets = [shared_socket(settings.host, settings.port)] if settings.reuse_port else None
    return DrainingServer(config, ready, listener, sockets)


def shared_socket(host: str, port: int) -> socket.socket:
    """The API socket, bound with ``SO_REUSEPORT``: other processes may bind the same port."""
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    return sock
