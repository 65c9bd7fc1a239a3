"""The streaming issue's reference point: a bare litestar SSE relay on ``httpx`` + ``httpx-aiohttp``.

"A bare litestar + httpx-aiohttp SSE relay measured 2,298 req/s" was the streaming target's
yardstick on another machine; this rebuilds it, so the proxy's streaming throughput can be
read as a ratio on the machine at hand. It relays the upstream's stream byte for byte and
does nothing else. Needs ``pip install '.[bench]'``.

Run: ``python tests/bench/reference_litestar_sse.py --upstream http://127.0.0.1:9000/v1 --port 9003``
"""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator

import httpx
from httpx_aiohttp import AiohttpTransport
from litestar import Litestar, Request, get, post
from litestar.response import Stream
from reference_app import serve


def build(upstream: str) -> Litestar:
    url = upstream.rstrip("/") + "/chat/completions"
    client = httpx.AsyncClient(transport=AiohttpTransport())

    @get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @post("/v1/chat/completions", status_code=200)
    async def relay(request: Request[object, object, object]) -> Stream:
        body = await request.body()
        response = await client.send(
            client.build_request("POST", url, content=body, headers={"content-type": "application/json"}),
            stream=True,
        )

        async def chunks() -> AsyncIterator[bytes]:
            try:
                async for chunk in response.aiter_raw():
                    yield chunk
            finally:
                await response.aclose()

        return Stream(chunks(), media_type="text/event-stream")

    async def close() -> None:
        await client.aclose()

    return Litestar([healthz, relay], on_shutdown=[close], openapi_config=None)


def main() -> None:
    parser = argparse.ArgumentParser(description="Reference: a bare litestar SSE relay on httpx-aiohttp.")
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    serve(build(args.upstream), args.host, args.port)


if __name__ == "__main__":
    main()
