"""The issue's reference point, rebuilt here: bare ASGI + ``httpx.AsyncClient`` on ``httpx-aiohttp``.

The performance targets of the core-proxy issue were set against this configuration
("the same client behind a bare ASGI callable: 3,068 req/s") on another machine. Running
it beside the proxy on the machine at hand turns those absolute targets into a ratio that
means something here. Needs ``pip install '.[bench]'`` (httpx-aiohttp).

Run: ``python tests/bench/reference_app.py --upstream http://127.0.0.1:9000/v1 --port 9002``
"""

from __future__ import annotations

import argparse
from typing import Any

import httpx
import uvicorn
from httpx_aiohttp import AiohttpTransport

Message = dict[str, Any]


class ReferenceApp:
    def __init__(self, upstream: str) -> None:
        self._url = upstream.rstrip("/") + "/chat/completions"
        self._client: httpx.AsyncClient | None = None

    async def __call__(self, scope: Message, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    self._client = httpx.AsyncClient(transport=AiohttpTransport())
                    await send({"type": "lifespan.startup.complete"})
                else:
                    if self._client is not None:
                        await self._client.aclose()
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["path"] == "/healthz":
            await _reply(send, 200, b'{"status":"ok"}')
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        assert self._client is not None
        request = self._client.build_request(
            "POST", self._url, content=body, headers={"content-type": "application/json"}
        )
        response = await self._client.send(request, stream=b'"stream":true' in body)
        if not response.is_stream_consumed:
            headers = [(b"content-type", response.headers.get("content-type", "text/event-stream").encode())]
            await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
            async for chunk in response.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await response.aclose()
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        await _reply(send, response.status_code, response.content)


async def _reply(send: Any, status: int, body: bytes) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


def main() -> None:
    parser = argparse.ArgumentParser(description="Reference: bare ASGI + httpx on httpx-aiohttp.")
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    serve(ReferenceApp(args.upstream), args.host, args.port)


def serve(app: Any, host: str, port: int) -> None:
    """uvicorn as the proxy runs it (uvloop, httptools, no access log or extra headers)."""
    uvicorn.run(
        app,
        host=host,
        port=port,
        loop="uvloop",
        http="httptools",
        access_log=False,
        log_level="warning",
        server_header=False,
        date_header=False,
        proxy_headers=False,
    )


if __name__ == "__main__":
    main()
