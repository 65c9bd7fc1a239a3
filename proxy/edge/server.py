"""Serve the app with uvicorn (uvloop + httptools) and drain gracefully on SIGTERM/SIGINT.

Connections go through :mod:`proxy.edge.connections`: every request is answered or closed,
and a request head slower than ``header_timeout`` closes its connection.

On a stop signal the proxy reports not-ready at once, stops accepting connections, lets
in-flight requests finish for up to ``shutdown_timeout`` seconds, then exits. Metrics are
served on a listener of their own (see :mod:`proxy.edge.metrics_listener`), up as long as the server.

Both ports are bound here, by :meth:`DrainingServer.bind`, before the proxy says it serves: a
port that cannot be bound is one :class:`~proxy.edge.listening.ListenError` naming the flag
that moves it (uvicorn is handed the bound socket and never binds one itself). With
``reuse_port`` they are bound with ``SO_REUSEPORT``, so several independent ``loopwarden serve``
processes share one port and the kernel spreads new connections over them: one event loop per
core. They share state through Redis and metrics through ``PROMETHEUS_MULTIPROC_DIR``; each
drains on its own.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import math
import os
import signal
import socket
from types import FrameType

import uvicorn
from prometheus_client import multiprocess

from proxy.edge.app import create_app
from proxy.edge.connections import GuardedHttpProtocol, guarded_websocket_protocol
from proxy.edge.console import Console
from proxy.edge.dispatch import GuardedFirst
from proxy.edge.listening import API, listening_socket
from proxy.edge.metrics_listener import MetricsListener
from proxy.edge.routes import Readiness
from proxy.observe.logs import log_event
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
        *,
        reuse_port: bool = False,
    ) -> None:
        super().__init__(config)
        self.readiness = readiness
        self.metrics = metrics
        self._reuse_port = reuse_port
        self._sockets: list[socket.socket] | None = None

    @property
    def port(self) -> int:
        """The API's bound port (``config.port`` until :meth:`bind`: 0 picks a free one)."""
        return int(self._sockets[0].getsockname()[1]) if self._sockets else self.config.port

    def bind(self) -> None:
        """Bind the API port and the metrics listener's (once): the ``serving`` line comes
        after this, so a port that cannot be bound is its :class:`ListenError` instead."""
        if self._sockets is None:
            self._sockets = [listening_socket(self.config.host, self.config.port, API, reuse_port=self._reuse_port)]
        self.metrics.bind()

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        if sockets is None:
            self.bind()
        self.metrics.start(asyncio.get_running_loop())
        try:
            await super().serve(sockets or self._sockets)
        finally:
            self.metrics.stop()
            if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
                multiprocess.mark_process_dead(os.getpid())  # type: ignore[no-untyped-call]
            log_event("stopped", {"in_flight": self.readiness.in_flight})

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if not self.readiness.draining:
            log_event(
                "shutting_down",
                {
                    "signal": signal.Signals(sig).name,
                    "in_flight": self.readiness.in_flight,
                    "grace_secs": self.config.timeout_graceful_shutdown,
                },
                logging.INFO,
            )
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
        interface="asgi3",  # GuardedFirst is a plain function handing back the work (no coroutine of its own)
        http=GuardedHttpProtocol.with_header_timeout(settings.header_timeout),
        ws=guarded_websocket_protocol() or "none",
        ws_max_size=settings.max_body_bytes,
        # No permessage-deflate: an event is small JSON, and compressing each one was a sixth of a
        # socket turn's CPU; the proxy compresses no HTTP stream either.
        ws_per_message_deflate=False,
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
    if secret is None and settings.reuse_port:
        log_event(
            "console_secret_unset",
            {"effect": "a console sign-in holds only in the worker that made it", "fix": "--console-secret"},
            logging.WARNING,
        )
    console = Console(
        app.state.console,
        settings.console_admin_key_sha256,
        secret=secret,
        secure_cookie=settings.console_cookie_secure,
    )
    listener = MetricsListener(
        series, settings.metrics_host, settings.metrics_port, reuse_port=settings.reuse_port, console=console
    )
    return DrainingServer(config, ready, listener, reuse_port=settings.reuse_port)
