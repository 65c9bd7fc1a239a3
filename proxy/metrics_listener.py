"""The metrics listener: ``/metrics`` on a port of its own, never on the API port.

The exposition names every tenant with its usage and spend, so it must not be readable by
whoever can reach the API. It is served on ``--metrics-host``/``--metrics-port`` (loopback
by default) by prometheus-client's own server, in a thread: a scrape renders the text
without holding up the event loop that serves model calls.
"""

from __future__ import annotations

import threading
from wsgiref.simple_server import WSGIServer

from prometheus_client import start_http_server

from proxy.logs import log_event
from proxy.metrics import Metrics

__all__ = ["MetricsListenError", "MetricsListener"]


class MetricsListenError(OSError):
    """The metrics port cannot be bound (in use, or an address the host does not have)."""


class MetricsListener:
    """Started and stopped with the server; ``port`` is the bound one (``0`` picks a free one)."""

    def __init__(self, metrics: Metrics, host: str, port: int) -> None:
        self._metrics = metrics
        self.host = host
        self.port = port
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        try:
            self._server, self._thread = start_http_server(
                self.port, addr=self.host, registry=self._metrics.scrape_registry()
            )
        except OSError as exc:
            raise MetricsListenError(
                exc.errno, f"cannot listen for metrics on {self.host}:{self.port}: {exc.strerror or exc}"
            ) from exc
        self.port = int(self._server.server_port)
        log_event("metrics_listening", {"host": self.host, "port": self.port})

    def stop(self) -> None:
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(5)
        self._server = self._thread = None
