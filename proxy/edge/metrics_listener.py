"""The metrics listener: ``/metrics`` on a port of its own, never on the API port.

The exposition names every tenant with its usage and spend, so it must not be readable by
whoever can reach the API. It is served on ``--metrics-host``/``--metrics-port`` (loopback
by default) by prometheus-client's WSGI app on a threading server: a scrape renders the
text without holding up the event loop that serves model calls. The operator console
(:mod:`proxy.edge.console`) shares the listener under ``/console``: its pages render on these
threads, its store reads run on the proxy's event loop (given to :meth:`MetricsListener.start`).
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

from proxy.edge.console import Console
from proxy.edge.listening import METRICS, cannot_listen
from proxy.observe.logs import log_event
from proxy.observe.metrics import Metrics

__all__ = ["MetricsListener"]

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def _with_console(metrics_app: WsgiApp, console: Console) -> WsgiApp:
    """``/console`` and below to the console, everything else to the exposition as before."""

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = str(environ.get("PATH_INFO") or "")
        if path == "/console" or path.startswith("/console/"):
            return console(environ, start_response)
        return metrics_app(environ, start_response)

    return app


class _QuietHandler(WSGIRequestHandler):
    """No access log on stderr: the proxy's log is JSON lines only."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


_POLL_SECS = 0.05
"""How soon the serving thread notices a stop (the stop waits for it)."""


class MetricsListener:
    """Started and stopped with the server; ``port`` is the bound one (``0`` picks a free one)."""

    def __init__(
        self, metrics: Metrics, host: str, port: int, *, reuse_port: bool = False, console: Console | None = None
    ) -> None:
        self.console = console
        self.host = host
        self.port = port
        self._reuse_port = reuse_port
        """Several worker processes share the port; any of them answers a scrape with every
        worker's samples (``PROMETHEUS_MULTIPROC_DIR``)."""
        self._server: ThreadingWSGIServer | None = None
        self._thread: threading.Thread | None = None
        self._metrics_app: WsgiApp = make_wsgi_app(metrics.scrape_registry())
        self._console_app = _with_console(self._metrics_app, console) if console is not None else self._metrics_app
        self._with_console = False

    def bind(self) -> ThreadingWSGIServer:
        """Bind the port (once), before the proxy says it serves: a port that cannot be bound
        is a :class:`~proxy.edge.listening.ListenError` naming the flag that moves it."""
        if self._server is not None:
            return self._server
        try:
            family = socket.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)[0][0]
            shape = {"address_family": family, "allow_reuse_port": self._reuse_port}
            server_class = type("MetricsServer", (ThreadingWSGIServer,), shape)
            self._server = make_server(self.host, self.port, self._app, server_class, handler_class=_QuietHandler)
        except OSError as exc:
            raise cannot_listen(exc, self.host, self.port, METRICS) from None
        self.port = int(self._server.server_port)
        return self._server

    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Serve (binding first if :meth:`bind` was not called); ``loop`` (the proxy's) runs
        the console's store reads (no loop: no console)."""
        if self.console is not None and loop is not None:
            self.console.bind(loop)
            self._with_console = True
        server = self.bind()
        self._thread = threading.Thread(
            target=server.serve_forever, args=(_POLL_SECS,), name="loopwarden-metrics", daemon=True
        )
        self._thread.start()
        log_event("metrics_listening", {"host": self.host, "port": self.port})

    def _app(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        """The exposition, and the console once it is bound to the proxy's loop."""
        app = self._console_app if self._with_console else self._metrics_app
        return app(environ, start_response)

    def stop(self) -> None:
        if self._server is None:
            return
        if self._thread is not None:  # bound and never served: nothing to shut down (it would wait forever)
            self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(5)
        self._server = self._thread = None
