"""The performance issue's "lean floor": a bare litestar pass-through on ``httpx`` + ``httpx-aiohttp``.

The mandated stack (litestar, httpx on aiohttp, uvicorn) doing nothing but relay: the
performance issue measured it at 1,972 req/s and 506 µs of CPU per request at c=16 and set
the proxy's targets against it ("memory state: CPU per request at most 1.05x the floor's").
It forwards the body, answers JSON with the upstream's bytes, and relays a stream byte for
byte when the request asks for one. Needs ``pip install '.[bench]'``.

Run: ``python tests/bench/lean_floor_app.py --upstream http://127.0.0.1:9000/v1 --port 9004``
"""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator

import httpx
from httpx_aiohttp import AiohttpTransport
from litestar import Litestar, Request, Response, get, post
from litestar.response import Stream
from reference_app import serve


def build(upstream: str) -> Litestar:
    url = upstream.rstrip("/") + "/chat/completions"
    client = httpx.AsyncClient(transport=AiohttpTransport())

    @get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @post("/v1/chat/completions", status_code=200)
    async def relay(request: Request[object, object, object]) -> Response[bytes] | Stream:
        body = await request.body()
        upstream_request = client.build_request("POST", url, content=body, headers={"content-type": "application/json"})
        if b'"stream":true' not in body:
            response = await client.send(upstream_request)
            return Response(
                response.content,
                status_code=response.status_code,
                media_type=response.headers.get("content-type", "application/json"),
            )
        streamed = await client.send(upstream_request, stream=True)

        async def chunks() -> AsyncIterator[bytes]:
            try:
                async for chunk in streamed.aiter_raw():
                    yield chunk
            finally:
                await streamed.aclose()

        return Stream(chunks(), media_type="text/event-stream")

    async def close() -> None:
        await client.aclose()

    return Litestar([healthz, relay], on_shutdown=[close], openapi_config=None)


def main() -> None:
    parser = argparse.ArgumentParser(description="The lean floor: a bare litestar pass-through on httpx-aiohttp.")
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    serve(build(args.upstream), args.host, args.port)


if __name__ == "__main__":
    main()
