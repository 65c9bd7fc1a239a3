"""HTTP requests sent exactly as written: paths and header bytes no client library would send.

httpx and requests normalize paths (``/v1/../x`` becomes ``/x``) and refuse non-ASCII
header values; attacks and real clients that do not are tested through this.
"""

from __future__ import annotations

import http.client
import json
import socket
from dataclasses import dataclass
from typing import Any


@dataclass
class RawResponse:
    status: int
    headers: http.client.HTTPMessage
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def raw_request(
    port: int, method: str, path: str, headers: dict[str, bytes | str] | None = None, body: bytes = b""
) -> RawResponse:
    """Send ``method path`` with the path as is (``--path-as-is``) and header values as bytes."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.putrequest(method, path, skip_host=False, skip_accept_encoding=True)
        for name, value in (headers or {}).items():
            connection.putheader(name, value)
        connection.putheader("Content-Length", str(len(body)))
        connection.endheaders(body)
        response = connection.getresponse()
        return RawResponse(response.status, response.headers, response.read())
    finally:
        connection.close()


def send_until_closed(port: int, data: bytes, timeout: float = 10.0) -> bytes:
    """Send ``data`` on a fresh connection and read until the server closes it; a server that
    holds the connection open past ``timeout`` seconds raises ``TimeoutError``."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        if data:
            sock.sendall(data)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
        return received
