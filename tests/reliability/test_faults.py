"""Upstream faults and load: bounded retries, fast clear errors, no 5xx of the proxy's own."""

from __future__ import annotations

import asyncio

import aiohttp
import httpx
import pytest

from tests.support.fake_upstream import Hang, Json
from tests.support.processes import serve_over_fast_upstream
from tests.support.timed import Stopwatch

AUTH = {"Authorization": "Bearer sk-p"}
BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
DOWN = {"error": {"message": "down", "type": "server_error", "param": None, "code": None}}


@pytest.mark.timeout(300)  # 100 requests with their retries: 24 s at a load of 12
def test_a_dead_upstream_gets_bounded_jittered_retries_then_a_fast_503(make_proxy, upstream):
    proxy = make_proxy(retry_attempts=3, retry_budget=0.2)
    upstream.script(*[Json(DOWN, status=503, headers={"Retry-After": "0"}) for _ in range(500)])
    requests = 100

    with Stopwatch() as watch:
        statuses = [
            httpx.post(f"{proxy.base_url}/chat/completions", json=BODY, headers=AUTH).status_code
            for _ in range(requests)
        ]

    calls_per_request = len(upstream.requests) / requests
    assert set(statuses) == {503}
    assert calls_per_request <= 1 + 0.2 + 10 / requests  # the budget's share, plus its initial burst
    assert watch.elapsed < watch.scaled(30)


def test_an_upstream_that_never_answers_is_a_504_within_the_deadline(make_proxy, upstream):
    proxy = make_proxy(total_timeout=1.0)
    upstream.script(Hang(10))

    with Stopwatch() as watch:
        response = httpx.post(f"{proxy.base_url}/chat/completions", json=BODY, headers=AUTH, timeout=60)

    assert response.status_code == 504
    assert watch.elapsed < 1.0 + watch.scaled(1.0)


@pytest.mark.slow
async def test_two_thousand_concurrent_requests_get_no_5xx(processes):
    """Real processes (the fast benchmark upstream and ``loopwarden serve``), so the load is
    not throttled by a test process sharing one interpreter with both servers; aiohttp as the
    load client, since httpx's default transport itself collapses at this concurrency."""
    url = serve_over_fast_upstream(processes) + "/v1/chat/completions"
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=500), headers=AUTH, timeout=timeout
    ) as client:

        async def one(n: int) -> int:
            payload = {"model": "m", "messages": [{"role": "user", "content": f"request {n}"}]}
            async with client.post(url, json=payload) as response:
                await response.read()
                return response.status

        statuses = await asyncio.gather(*(one(n) for n in range(2000)))

    assert statuses.count(200) == 2000
