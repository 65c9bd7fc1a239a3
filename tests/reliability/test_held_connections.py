"""No request can hold a connection: whatever its method and headers, it is answered or closed
within seconds, and a client whose request head trickles in is cut off (slowloris)."""

from __future__ import annotations

import os
import socket
import time

import pytest

from tests.support.processes import free_port, spawn, wait_healthy
from tests.support.raw_http import send_until_closed

KEY = b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"


def _upgrade(method: str, key: bool = False, extra: bytes = b"\r\n") -> bytes:
    head = (
        f"{method} /v1/responses HTTP/1.1\r\nHost: proxy\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        "Sec-WebSocket-Version: 13\r\n"
    ).encode()
    return head + (KEY if key else b"") + extra


def _status(reply: bytes) -> int:
    return int(reply.split(b" ", 2)[1])


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (_upgrade("HEAD"), 426),
        (_upgrade("HEAD", key=True), 426),
        (_upgrade("POST", extra=b"Content-Length: 2\r\n\r\n{}"), 426),
        (_upgrade("POST", key=True, extra=b"Content-Length: 2\r\n\r\n{}"), 426),
        (_upgrade("PUT"), 426),
        (_upgrade("OPTIONS", key=True), 426),
        (_upgrade("GET"), 400),
        (_upgrade("GET", key=True, extra=b"Content-Length: 3\r\n\r\nabc"), 400),
        (_upgrade("GET", key=True, extra=b"Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"), 400),
    ],
    ids=["head", "head-key", "post", "post-key", "put", "options-key", "get-no-key", "get-body", "get-chunked"],
)
def test_an_upgrade_request_is_answered_and_closed_whatever_its_method(proxy, request_bytes, status):
    reply = send_until_closed(proxy.port, request_bytes)
    assert _status(reply) == status


def test_an_upgrade_refused_over_http_speaks_the_routes_error_shape(proxy):
    reply = send_until_closed(proxy.port, _upgrade("POST", extra=b"Content-Length: 2\r\n\r\n{}"))
    assert b'"code":"websocket_not_supported"' in reply.replace(b" ", b"")


def test_a_request_head_slower_than_the_header_timeout_is_closed(make_proxy):
    running = make_proxy(header_timeout=0.5)
    assert send_until_closed(running.port, b"POST /v1/chat/completions HTTP/1.1\r\nHost: proxy\r\n") == b""


def test_a_connection_that_sends_nothing_is_closed(make_proxy):
    running = make_proxy(header_timeout=0.5)
    assert send_until_closed(running.port, b"") == b""


def test_a_request_within_the_header_timeout_is_served(make_proxy):
    running = make_proxy(header_timeout=0.5)
    reply = send_until_closed(running.port, b"GET /healthz HTTP/1.1\r\nHost: proxy\r\nConnection: close\r\n\r\n")
    assert _status(reply) == 200


def _descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors through /proc")
def test_descriptors_return_to_baseline_after_many_keyless_upgrades(processes):
    port = free_port()
    process = spawn(["serve", "--upstream", "http://127.0.0.1:9/v1", "--port", str(port), "--log-level", "warning"])
    processes.append(process)
    wait_healthy(f"http://127.0.0.1:{port}", process)
    baseline = _descriptors(process.pid)
    connections = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(200)]
    try:
        for number, sock in enumerate(connections):
            sock.sendall(_upgrade(("HEAD", "POST")[number % 2], extra=b"Content-Length: 0\r\n\r\n"))
        for sock in connections:
            reply = b""
            while chunk := sock.recv(65536):  # the server closes each after its answer
                reply += chunk
            assert _status(reply) == 426
    finally:
        for sock in connections:
            sock.close()
    deadline = time.monotonic() + 5  # closed sockets are released as the server's loop gets to them
    while _descriptors(process.pid) > baseline + 5 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _descriptors(process.pid) <= baseline + 5
