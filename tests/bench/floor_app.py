"""The benchmark's "floor": the cheapest pass-through the proxy's own stack allows.

A bare ASGI callable (no framework, no auth, no parsing, no logging) served by uvicorn
exactly as ``proxy.edge.server.build_server`` configures it (uvloop, httptools, no access log,
no date/server headers), forwarding each request body upstream with the proxy's client
stack: an ``httpx.Request`` sent through ``proxy.upstream.transport.UpstreamTransport`` and read with
``response.aread()`` (the body read in one go, as the proxy does). The gap between this
and the proxy is what the proxy's own code costs; the gap between this and "direct" is
what any Python hop on this stack costs.

Run: ``python tests/bench/floor_app.py --upstream http://127.0.0.1:9000/v1 --port 9001``
"""

from __future__ import annotations

import argparse
from typing import Any

import httpx
import uvicorn

from proxy.upstream.transport import READ_BODY, UpstreamTransport

# The proxy's default per-attempt timeouts (Settings: connect 10, read 300, pool 10), so the
# transport arms the same aiohttp timers the proxy's does.
_TIMEOUTS = {"connect": 10.0, "read": 300.0, "write": 300.0, "pool": 10.0}
# Forwarded like the proxy does for the open tenant; everything else is dropped.
_FORWARDED = (b"content-type", b"authorization")
_HEALTHZ = b'{"status":"ok"}'

Message = dict[str, Any]


class FloorApp:
    """ASGI app: ``GET /healthz`` answers locally, anything else goes to ``{upstream}/chat/completions``."""

    def __init__(self, upstream: str, max_connections: int = 256) -> None:
        self._url = httpx.URL(upstream.rstrip("/") + "/chat/completions")  # parsed once
        # Same pool size as the proxy's default --max-upstream-connections.
        self._transport = UpstreamTransport(max_connections=max_connections)

    async def __call__(self, scope: Message, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] == "http":
            if scope["path"] == "/healthz":
                await _reply(send, 200, [(b"content-type", b"application/json")], _HEALTHZ)
            else:
                await self._forward(scope, receive, send)

    async def _forward(self, scope: Message, receive: Any, send: Any) -> None:
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"] if k in _FORWARDED]
        request = httpx.Request(
            "POST",
            self._url,
            headers=headers,
            content=b"".join(chunks),
            extensions={"timeout": _TIMEOUTS, READ_BODY: True},
        )
        try:
            response = await self._transport.handle_async_request(request)
            body = await response.aread()
        except httpx.TransportError:
            await _reply(send, 502, [(b"content-type", b"text/plain")], b"upstream failed")
            return
        content_type = response.headers.get("content-type", "application/json").encode("latin-1")
        await _reply(send, response.status_code, [(b"content-type", content_type)], body)

    async def _lifespan(self, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self._transport.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return


async def _reply(send: Any, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    # An explicit Content-Length, as the proxy's send_reply sets: without it uvicorn would
    # fall back to chunked encoding and the two would not put the same bytes on the wire.
    headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


def main() -> None:
    parser = argparse.ArgumentParser(description="Bare ASGI pass-through (benchmark floor).")
    parser.add_argument("--upstream", required=True, help="Upstream base URL, e.g. http://127.0.0.1:9000/v1")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    # Mirrors proxy.edge.server.build_server so the server stack is not a variable.
    config = uvicorn.Config(
        FloorApp(args.upstream),
        host=args.host,
        port=args.port,
        loop="uvloop",
        http="httptools",
        lifespan="on",
        access_log=False,
        log_config=None,
        log_level="warning",
        server_header=False,
        proxy_headers=False,
        date_header=False,
        timeout_keep_alive=75,
    )
    uvicorn.Server(config).run()


if __name__ == "__main__":
    main()
