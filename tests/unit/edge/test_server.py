"""The server as the CLI builds it: uvicorn configured from the settings, the metrics listener
beside it, readiness flagged draining at a stop signal, and a shared socket for several processes."""

from __future__ import annotations

import signal
import socket

from proxy.edge.server import build_server, shared_socket
from proxy.settings import Settings

SETTINGS = Settings(upstream="http://127.0.0.1:9/v1", port=0, metrics_port=0, shutdown_timeout=2.5)


def test_uvicorn_is_configured_from_the_settings_without_access_log_or_server_header():
    server = build_server(SETTINGS.model_copy(update={"host": "127.0.0.2"}))

    config = server.config
    assert (config.host, config.port, config.timeout_graceful_shutdown) == ("127.0.0.2", 0, 3)
    assert (config.access_log, config.server_header, config.date_header, config.proxy_headers) == (
        False,
        False,
        False,
        False,
    )


def test_the_metrics_listener_is_built_on_its_own_address():
    server = build_server(SETTINGS.model_copy(update={"metrics_host": "127.0.0.3", "metrics_port": 9999}))

    assert (server.metrics.host, server.metrics.port) == ("127.0.0.3", 9999)


def test_a_stop_signal_flags_readiness_as_draining_and_exits_cleanly():
    server = build_server(SETTINGS)

    server.handle_exit(signal.SIGTERM, None)

    assert server.readiness.draining
    assert server.should_exit
    assert not getattr(server, "_captured_signals", [])  # not re-raised after the drain


def test_a_shared_socket_lets_another_process_bind_the_same_port():
    first = shared_socket("127.0.0.1", 0)
    port = first.getsockname()[1]
    try:
        second = shared_socket("127.0.0.1", port)
        second.close()
    finally:
        first.close()


def test_with_reuse_port_the_api_socket_is_bound_before_serving():
    server = build_server(SETTINGS.model_copy(update={"reuse_port": True}))
    try:
        [bound] = server._sockets or []
        assert bound.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT) == 1
    finally:
        for sock in server._sockets or []:
            sock.close()
