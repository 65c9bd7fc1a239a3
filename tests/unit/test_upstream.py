"""The upstream client's retry decisions, with the transport swapped for httpx.MockTransport."""

from __future__ import annotations

import httpx
import pytest

from proxy.errors import UpstreamDisconnected, UpstreamTimeout, UpstreamUnreachable
from proxy.settings import Settings
from proxy.upstream import UpstreamClient


def _client(outcomes: list, **settings):
    calls: list[httpx.Request] = []
    sleeps: list[float] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return httpx.Response(outcome, json={})

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    client = UpstreamClient(
        Settings(upstream="http://up/v1", **settings), httpx.MockTransport(handler), sleep=sleep, draw=lambda: 1.0
    )
    return client, calls, sleeps


async def _send(client):
    return await client.send("POST", "http://up/v1/chat/completions", [], b"{}")


async def test_connect_errors_are_retried_then_succeed():
    client, calls, sleeps = _client([httpx.ConnectError("refused"), 200])

    reply = await _send(client)

    assert (reply.response.status_code, reply.attempts, len(calls)) == (200, 2, 2)
    assert sleeps == [0.5]


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (httpx.ReadError("reset"), UpstreamDisconnected),
        (httpx.RemoteProtocolError("closed"), UpstreamDisconnected),
        (httpx.ReadTimeout("slow"), UpstreamTimeout),
    ],
)
async def test_faults_after_the_request_left_are_not_retried(error, expected):
    client, calls, _ = _client([error, 200])

    with pytest.raises(expected):
        await _send(client)

    assert len(calls) == 1


async def test_exhausted_connect_errors_raise_unreachable():
    client, calls, sleeps = _client([httpx.ConnectError("refused")] * 3, retry_attempts=3)

    with pytest.raises(UpstreamUnreachable):
        await _send(client)

    assert len(calls) == 3
    assert sleeps == [0.5, 1.0]


async def test_backoff_sleeps_double_between_transient_statuses():
    client, _, sleeps = _client([503, 503, 503, 200], retry_attempts=4)

    reply = await _send(client)

    assert reply.response.status_code == 200
    assert sleeps == [0.5, 1.0, 2.0]
    assert reply.waited == 3.5


async def test_no_wait_is_started_that_would_end_past_the_deadline():
    client, calls, sleeps = _client([503, 200], total_timeout=0.2, retry_base_delay=1.0)

    reply = await _send(client)

    assert reply.response.status_code == 503
    assert (len(calls), sleeps) == (1, [])


async def test_retries_stop_when_the_retry_budget_is_spent():
    outcomes = [503] * 100
    client, calls, _ = _client(outcomes, retry_attempts=3, retry_budget=0.0)

    replies = [await _send(client) for _ in range(10)]

    assert all(r.response.status_code == 503 for r in replies)
    assert len(calls) == 10 + 10  # the burst of 10 retries, then none at all


async def test_a_non_ascii_header_value_is_sent_as_utf8():
    client, calls, _ = _client([200])

    await client.send("POST", "http://up/v1/chat/completions", [("x-session-id", "séance ☕")], b"{}")

    assert calls[0].headers.raw[-1] == (b"x-session-id", "séance ☕".encode())


async def test_an_error_after_retries_carries_the_attempts_and_asks_clients_not_to_retry():
    client, _, _ = _client([httpx.ConnectError("refused")] * 3, retry_attempts=3)

    with pytest.raises(UpstreamUnreachable) as raised:
        await _send(client)

    assert raised.value.headers == {"x-loopwarden-upstream-attempts": "3", "x-should-retry": "false"}
