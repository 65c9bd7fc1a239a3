"""Run the real proxy (uvicorn, real sockets) in a background thread for a test."""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

from proxy.edge.routes import Readiness
from proxy.edge.server import DrainingServer, build_server
from proxy.observe.logs import configure_logging
from proxy.settings import Settings
from tests.support.waiting import wait_for


@dataclass
class RunningProxy:
    server: DrainingServer
    thread: threading.Thread
    port: int
    settings: Settings

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def metrics_url(self) -> str:
        """The metrics listener (``GET {metrics_url}/metrics``), apart from the API port."""
        return f"http://127.0.0.1:{self.server.metrics.port}"

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    @property
    def readiness(self) -> Readiness:
        return self.server.readiness

    @property
    def idle(self) -> bool:
        """No request in flight, so nothing it does while stopping can reach a later test."""
        return self.server.readiness.in_flight == 0

    def request_stop(self) -> None:
        """Stop accepting connections now and ask the server to stop, without waiting for its
        graceful shutdown (uvicorn notices the request within its 0.1 s tick)."""
        self.server.should_exit = True
        listeners = getattr(self.server, "servers", [])
        for listener in listeners:
            listener.get_loop().call_soon_threadsafe(listener.close)
        deadline = time.monotonic() + 1
        while any(listener.is_serving() for listener in listeners) and time.monotonic() < deadline:
            time.sleep(0.001)

    def stop(self) -> None:
        self.request_stop()
        self.thread.join(15)


def start_proxy(**overrides: Any) -> RunningProxy:
    """Start a proxy on a free loopback port with ``overrides`` on top of test-friendly settings."""
    values: dict[str, Any] = {
        "retry_base_delay": 0.01,
        "retry_max_delay": 0.05,
        "shutdown_timeout": 5.0,
        "metrics_port": 0,
    }
    values.update(overrides)
    settings = Settings(**values)
    configure_logging(settings.log_level)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = build_server(settings)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    if not wait_for(lambda: server.started or not thread.is_alive()) or not server.started:
        server.should_exit = True
        why = "its thread ended (the traceback is in the captured stderr)" if not thread.is_alive() else "not in time"
        raise RuntimeError(f"proxy did not start: {why}")
    return RunningProxy(server, thread, port, settings)
