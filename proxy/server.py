"""Serve the app with uvicorn (uvloop + httptools) and drain gracefully on SIGTERM/SIGINT.

On a stop signal the proxy reports not-ready at once, stops accepting connections, lets
in-flight requests finish for up to ``shutdown_timeout`` seconds, then exits.
"""

from __future__ import annotations

import importlib.util
import math
from types import FrameType

import uvicorn

from proxy.app import create_app
from proxy.routes import Readiness
from proxy.settings import Settings

__all__ = ["DrainingServer", "build_server"]


class DrainingServer(uvicorn.Server):
    """uvicorn's server, flagging readiness as draining the moment a stop signal arrives."""

    def __init__(self, config: uvicorn.Config, readiness: Readiness) -> None:
        super().__init__(config)
        self.readiness = readiness

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
    app = create_app(settings, readiness=ready)
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
    return DrainingServer(config, ready)
