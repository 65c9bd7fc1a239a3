"""Binding the proxy's ports: a port that cannot be bound is one line naming the address, why,
and the flag (and variable) that changes it."""

from __future__ import annotations

import errno
import socket

import pytest

from proxy.edge.listening import API, METRICS, ListenError, cannot_listen, listening_socket


@pytest.mark.parametrize(
    ("error", "listener", "says"),
    [
        pytest.param(
            OSError(errno.EADDRINUSE, "Address already in use"),
            API,
            "the API cannot listen on 127.0.0.1:8080: port 8080 is already in use (another loopwarden, or another "
            "program, listens there); stop it, or give the API another port with --port (LOOPWARDEN_PORT)",
            id="api-port-in-use",
        ),
        pytest.param(
            OSError(errno.EADDRINUSE, "Address already in use"),
            METRICS,
            "the metrics listener cannot listen on 127.0.0.1:8080: port 8080 is already in use (another loopwarden, "
            "or another program, listens there); stop it, or give the metrics listener another port with "
            "--metrics-port (LOOPWARDEN_METRICS_PORT)",
            id="metrics-port-in-use",
        ),
        pytest.param(
            OSError(errno.EACCES, "Permission denied"),
            API,
            "the API cannot listen on 127.0.0.1:8080: no permission to listen on port 8080 (ports below 1024 need "
            "privileges); give the API another port with --port (LOOPWARDEN_PORT)",
            id="privileged-port",
        ),
        pytest.param(
            OSError(errno.EADDRNOTAVAIL, "Cannot assign requested address"),
            METRICS,
            "the metrics listener cannot listen on 127.0.0.1:8080: this machine has no address '127.0.0.1'; give "
            "the metrics listener another with --metrics-host (LOOPWARDEN_METRICS_HOST)",
            id="foreign-address",
        ),
        pytest.param(
            socket.gaierror(socket.EAI_NONAME, "Name or service not known"),
            API,
            "the API cannot listen on 127.0.0.1:8080: this machine has no address '127.0.0.1'; give the API another "
            "with --host (LOOPWARDEN_HOST)",
            id="unknown-name",
        ),
        pytest.param(
            OSError(errno.ENOBUFS, "No buffer space available"),
            API,
            "the API cannot listen on 127.0.0.1:8080: No buffer space available; check --host (LOOPWARDEN_HOST) "
            "and --port (LOOPWARDEN_PORT)",
            id="anything-else",
        ),
    ],
)
def test_a_failed_bind_names_the_address_why_and_the_flag_that_fixes_it(error, listener, says):
    failed = cannot_listen(error, "127.0.0.1", 8080, listener)

    assert isinstance(failed, ListenError)
    assert failed.strerror == says


def test_a_port_another_socket_holds_is_a_listen_error_naming_the_port_flag():
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]

        with pytest.raises(ListenError) as failed:
            listening_socket("127.0.0.1", port)

    assert failed.value.errno == errno.EADDRINUSE
    assert f"127.0.0.1:{port}" in failed.value.strerror
    assert "--port (LOOPWARDEN_PORT)" in failed.value.strerror


def test_an_address_the_machine_does_not_have_is_a_listen_error_naming_the_host_flag():
    with pytest.raises(ListenError, match=r"no address '192\.0\.2\.1'.*--host"):
        listening_socket("192.0.2.1", 0)


def test_the_bound_socket_already_queues_connections():
    sock = listening_socket("127.0.0.1", 0)
    try:
        with socket.create_connection(sock.getsockname(), timeout=5):
            pass  # accepted by the kernel before anyone calls accept()
    finally:
        sock.close()


def test_with_reuse_port_another_socket_binds_the_same_port():
    first = listening_socket("127.0.0.1", 0, reuse_port=True)
    try:
        second = listening_socket("127.0.0.1", first.getsockname()[1], reuse_port=True)
        assert second.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT) == 1
        second.close()
    finally:
        first.close()
