"""A WebSocket client that reads only when asked: no background thread, no message queue, a
small receive buffer, no compression. WebSocket libraries read the socket on their own and
queue what arrives, so a test of the proxy's backpressure (a client that stops reading) needs
a client that really stops."""

from __future__ import annotations

import base64
import json
import os
import socket
import struct
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["RawSocket"]

_RECEIVE_BUFFER = 65536


class RawSocket:
    """One client WebSocket (RFC 6455 framing, text messages only)."""

    def __init__(self, port: int, path: str, headers: Mapping[str, str]) -> None:
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _RECEIVE_BUFFER)  # before connecting
        self._sock.settimeout(300)  # a loaded machine: the proxy may take long to refill
        self._sock.connect(("127.0.0.1", port))
        key = base64.b64encode(os.urandom(16)).decode()
        lines = [f"GET {path} HTTP/1.1", "Host: 127.0.0.1", "Upgrade: websocket", "Connection: Upgrade"]
        lines += [f"Sec-WebSocket-Key: {key}", "Sec-WebSocket-Version: 13"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        self._sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        self._file = self._sock.makefile("rb")
        status = self._file.readline()
        while self._file.readline() not in (b"\r\n", b""):
            pass
        if not status.startswith(b"HTTP/1.1 101"):
            raise ConnectionError(status.decode().strip())

    def __enter__(self) -> RawSocket:
        return self

    def __exit__(self, *_: object) -> None:
        self._file.close()
        self._sock.close()

    def send_text(self, text: str) -> None:
        self._send(0x81, text.encode())

    def _send(self, opcode: int, data: bytes) -> None:
        mask, size = os.urandom(4), len(data)
        head = bytes([opcode, 0x80 | size]) if size < 126 else bytes([opcode, 0x80 | 126]) + struct.pack(">H", size)
        self._sock.sendall(head + mask + bytes(byte ^ mask[n % 4] for n, byte in enumerate(data)))

    def texts_until(self, last: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
        """The text messages (JSON) read up to the first for which ``last`` is true."""
        events: list[dict[str, Any]] = []
        while not events or not last(events[-1]):
            events.append(json.loads(self._message()))
        return events

    def _message(self) -> bytes:
        first, second = self._exactly(2)
        size = second & 0x7F
        if size == 126:
            size = struct.unpack(">H", self._exactly(2))[0]
        elif size == 127:
            size = struct.unpack(">Q", self._exactly(8))[0]
        payload = self._exactly(size)
        opcode = first & 0x0F
        if opcode == 0x8:
            raise ConnectionError(f"closed by the server: {payload[:2].hex()}")
        if opcode == 0x9:  # a ping: the server closes a client that does not answer
            self._send(0x8A, payload)
        return payload if opcode == 0x1 else self._message()

    def _exactly(self, size: int) -> bytes:
        data = self._file.read(size)
        if len(data) < size:
            raise ConnectionError("the server closed the connection")
        return data
