"""WebSocket upgrades, refused: every route of the proxy speaks HTTP.

Codex's built-in provider first tries a WebSocket on ``/v1/responses``; a 426 with OpenAI's
error body makes it fall back to HTTP at once (a 404 or 403 cost it five reconnects).
"""

from __future__ import annotations

from typing import Any

from litestar.enums import ScopeType
from litestar.types import HTTPScope, Scope, Send

from proxy.edge.http import header, send_error
from proxy.errors import WebSocketRefused

__all__ = ["NO_WEBSOCKETS", "asks_websocket", "refuse_websocket"]

NO_WEBSOCKETS = WebSocketRefused("This route takes no WebSocket; send the request over HTTP (POST).")


def asks_websocket(scope: HTTPScope) -> bool:
    """An upgrade to a WebSocket that reached the app as plain HTTP (a server without a
    WebSocket library serves it so)."""
    upgrade = header(scope, b"upgrade")
    if upgrade is None or upgrade.strip().lower() != "websocket":
        return False
    connection = header(scope, b"connection") or ""
    return "upgrade" in (token.strip().lower() for token in connection.split(","))


async def refuse_websocket(scope: Scope, send: Send, body: bytes | None = None) -> None:
    """Refuse a WebSocket upgrade with 426 and the route's error body (``body``; OpenAI's by
    default), a bare close where the server cannot send a response: Codex's WebSocket
    transport falls back to HTTP at once."""
    if body is None:
        body = NO_WEBSOCKETS.body()
    if scope["type"] == ScopeType.HTTP:
        await send_error(send, NO_WEBSOCKETS, body=body)
        return
    extensions = scope.get("extensions") or {}
    if "websocket.http.response" not in extensions:
        close: Any = {"type": "websocket.close", "code": 1008}
        await send(close)
        return
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    start: Any = {"type": "websocket.http.response.start", "status": NO_WEBSOCKETS.status, "headers": headers}
    await send(start)
    end: Any = {"type": "websocket.http.response.body", "body": body}
    await send(end)
