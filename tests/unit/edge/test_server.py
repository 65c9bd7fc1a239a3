"""The server as the CLI builds it: uvicorn configured from the settings, the metrics listener
beside it, readiness flagged draining at a stop signal, and a shared socket for several processes."""

from __future__ import annotations

import signal
import socket

import pytest
from pydantic import SecretStr

from proxy.edge.listening import ListenError
from proxy.edge.server import build_server
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


def _closed(server) -> None:
    for sock in server._sockets or []:
        sock.close()
    server.metrics.stop()


def test_binding_takes_both_ports_before_serving_and_knows_the_ones_picked():
    server = build_server(SETTINGS)
    try:
        server.bind()

        assert server.port != 0
        assert server.metrics.port != 0
        assert server.port != server.metrics.port
    finally:
        _closed(server)


def test_with_reuse_port_the_api_socket_is_bound_shared():
    server = build_server(SETTINGS.model_copy(update={"reuse_port": True}))
    try:
        server.bind()
        [bound] = server._sockets or []
        assert bound.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT) == 1
    finally:
        _closed(server)


def test_an_api_port_in_use_is_a_listen_error_before_the_metrics_listener_is_bound():
    with socket.create_server(("127.0.0.1", 0)) as taken:
        server = build_server(SETTINGS.model_copy(update={"port": taken.getsockname()[1]}))
        try:
            with pytest.raises(ListenError, match="--port"):
                server.bind()
            assert server.metrics._server is None
        finally:
            _closed(server)


def test_reuse_port_workers_without_a_console_secret_are_warned_that_sign_ins_stay_per_worker(log_records):
    build_server(SETTINGS.model_copy(update={"reuse_port": True}))

    warned = [r.fields for r in log_records if r.getMessage() == "console_secret_unset"]
    assert warned == [{"effect": "a console sign-in holds only in the worker that made it", "fix": "--console-secret"}]


@pytest.mark.parametrize("update", [{"reuse_port": False}, {"reuse_port": True, "console_secret": SecretStr("s" * 32)}])
def test_a_single_process_or_a_shared_console_secret_draws_no_console_warning(log_records, update):
    build_server(SETTINGS.model_copy(update=update))

    assert "console_secret_unset" not in [r.getMessage() for r in log_records]
