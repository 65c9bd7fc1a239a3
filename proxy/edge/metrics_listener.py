"""The metrics listener: ``/metrics`` on a port of its own, never on the API port.

The exposition names every tenant with its usage and spend, so it must not be readable by
whoever can reach the API. It is served on ``--metrics-host``/``--metrics-port`` (loopback
by default) by prometheus-client's WSGI app on a threading server: a scrape renders the
text without holding up the event loop that serves model calls.
"""

from __future__ import annotations

import socket
import threading
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

from proxy.observe.logs import log_event
from proxy.observe.metrics import Metrics

__all__ = ["MetricsListenError", "MetricsListener"]


class MetricsListenError(OSError):
    """The metrics port cannot be bound (in use, or an address the host does not have)."""


class _QuietHandler(WSGIRequestHandler):
    """No access log on stderr: the proxy's log is JSON lines only."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


_POLL_SECS = 0.05
"""How soon the serving thread notices a stop (the stop waits for it)."""


class MetricsListener:
    """Started and stopped with the server; ``port`` is the bound one (``0`` picks a free one)."""

    def __init__(self, metrics: Metrics, host: str, port: int, *, reuse_port: bool = False) -> None:
        self._metrics = metrics
        self.host = host
        self.port = port
        self._reuse_port = reuse_port
        """Several worker processes share the port; any of them answers a scrape with every
        worker's samples (``PROMETHEUS_MULTIPROC_DIR``)."""
        self._server: ThreadingWSGIServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        app = make_wsgi_app(self._metrics.scrape_registry())
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
