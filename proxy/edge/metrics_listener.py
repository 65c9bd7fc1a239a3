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
from proxy.observe.logs import log_event
from proxy.observe.metrics import Metrics

__all__ = ["MetricsListenError", "MetricsListener"]


class MetricsListenError(OSError):
    """The metrics port cannot be bound (in use, or an address the host does not have)."""


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
        self._metrics = metrics
        self.console = console
        self.host = host
        self.port = port
        self._reuse_port = reuse_port
        """Several worker processes share the port; any of them answers a scrape with every
        worker's samples (``PROMETHEUS_MULTIPROC_DIR``)."""
        self._server: ThreadingWSGIServer | None = None
        self._thread: threading.Thread | None = None

    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Serve; ``loop`` (the proxy's) runs the console's store reads (no loop: no console)."""
        app = make_wsgi_app(self._metrics.scrape_registry())
        if self.console is not None and loop is not None:
            self.console.bind(loop)
            app = _with_console(app, self.console)
        try:
            family = socket.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)[0][0]
            shape = {"address_family": family, "allow_reuse_port": self._reuse_port}
            server_class = type("MetricsServer", (ThreadingWSGIServer,), shape)
            self._server = make_server(self.host, self.port, app, server_class, handler_class=_QuietHandler)
        except OSError as exc:
            raise MetricsListenError(
                exc.errno, f"cannot listen for metrics on {self.host}:{self.port}: {exc.strerror or exc}"
            ) from exc
        self.port = int(self._server.server_port)
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(_POLL_SECS,), name="loopwarden-metrics", daemon=True
        )
        self._thread.start()
        log_event("metrics_listening", {"host": self.host, "port": self.port})

    def stop(self) -> None:
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(5)
        self._server = self._thread = None
