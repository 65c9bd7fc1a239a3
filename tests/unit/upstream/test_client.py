"""The upstream client's retry decisions, with the transport swapped for httpx.MockTransport."""

from __future__ import annotations

import asyncio
import itertools
import tracemalloc

import httpx
import pytest

from proxy.errors import UpstreamDisconnected, UpstreamTimeout, UpstreamUnreachable
from proxy.observe.metrics import Metrics
from proxy.settings import Settings
from proxy.upstream.client import UpstreamClient
from tests.support.waiting import async_wait_for


def _taking(seconds: float):
    """A clock that moves ``seconds`` each time it is read: every attempt takes that long to fail."""
    ticks = itertools.count()
    return lambda: next(ticks) * seconds


SLOW = 1.0
"""How long a fault takes in these tests unless one says otherwise: a slow one (over ``fast_fault``)."""
FAST = 0.001


def _client(outcomes: list, *, fault_seconds: float = SLOW, **settings):
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
        Settings(upstream="http://up/v1", **settings),
        httpx.MockTransport(handler),
        sleep=sleep,
        draw=lambda: 1.0,
        clock=_taking(fault_seconds),
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

    replies = [await client.send("POST", "http://up/v1/chat/completions", [], b"%d" % n) for n in range(10)]

    assert all(r.response.status_code == 503 for r in replies)
    assert len(calls) == 10 + 10  # the burst of 10 retries, then none at all


async def test_a_non_ascii_header_value_is_sent_as_utf8():
    client, calls, _ = _client([200])

    await client.send("POST", "http://up/v1/chat/completions", [("x-session-id", "séance ☕")], b"{}")

    assert calls[0].headers.raw[-1] == (b"x-session-id", "séance ☕".encode())


async def test_an_error_after_retries_carries_the_attempts_and_asks_clients_not_to_retry():
    client, _, _ = _client([httpx.ConnectError("refused")] * 6, retry_attempts=3)  # 6 shared with the client
    with pytest.raises(UpstreamUnreachable):
        await _send(client)

    with pytest.raises(UpstreamUnreachable) as raised:
        await _send(client)  # the client's retry

    assert raised.value.headers == {"x-loopwarden-upstream-attempts": "3", "x-should-retry": "false"}


def _paced_client(outcomes: list, **settings):
    """Like ``_client``, but every status carries ``Retry-After: 1``."""
    calls: list[httpx.Request] = []
    sleeps: list[float] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        status = outcomes.pop(0)
        return httpx.Response(status, json={}, headers={"Retry-After": "1"} if status != 200 else {})

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    client = UpstreamClient(
        Settings(upstream="http://up/v1", **settings), httpx.MockTransport(handler), sleep=sleep, draw=lambda: 1.0
    )
    return client, calls, sleeps


async def test_a_storm_of_429s_with_retry_after_is_waited_out_past_the_backoff_attempts():
    client, calls, sleeps = _paced_client([429] * 5 + [200], retry_attempts=3)

    reply = await _send(client)

    assert reply.response.status_code == 200
    assert (len(calls), sleeps, reply.attempts) == (6, [1.0] * 5, 6)
    assert not reply.retries_spent


async def test_named_waits_stop_when_their_sum_would_pass_the_cap():
    client, calls, sleeps = _paced_client([429] * 5 + [200], retry_after_cap=2.5)

    reply = await _send(client)

    assert reply.response.status_code == 429
    assert (len(calls), sleeps) == (3, [1.0, 1.0])
    assert not reply.retries_spent  # a 429: the client's own backoff takes over


async def test_named_waits_stop_at_the_paced_attempts():
    client, calls, _ = _paced_client([503] * 5 + [200], retry_after_attempts=4)

    reply = await _send(client)

    assert (reply.response.status_code, len(calls)) == (503, 4)
    assert not reply.retries_spent  # it says when to come back


async def test_a_retried_5xx_without_retry_after_asks_clients_not_to_retry():
    client, _, _ = _client([503] * 6, retry_attempts=3)

    await _send(client)
    reply = await _send(client)  # the client's retry spends the shared budget

    assert reply.retries_spent


async def test_a_named_wait_is_cancelled_with_its_request():
    calls: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return httpx.Response(429, json={}, headers={"Retry-After": "30"})

    client = UpstreamClient(Settings(upstream="http://up/v1", retry_after_cap=60), httpx.MockTransport(handler))
    task = asyncio.ensure_future(_send(client))
    await async_wait_for(lambda: calls)  # the event loop runs on while the request waits
    task.cancel()

    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(calls) == 1


async def test_distinct_long_urls_are_not_kept_parsed():
    client = UpstreamClient(Settings(upstream="http://up/v1"), httpx.MockTransport(lambda _: httpx.Response(200)))
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for n in range(200):  # a client's query string rides along on model calls
            await client.send("POST", f"http://up/v1/chat/completions?{n}=" + "x" * 60_000, [], b"{}")
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()

    assert held < 2_000_000  # 200 parsed 60 kB URLs kept would hold ~24 MB


# -- the budget a request shares with the client's retries of it ---------------------------


async def test_a_client_retry_of_the_same_request_gets_the_attempts_left():
    client, calls, _ = _client([503, 503, 503, 200], retry_attempts=3)

    first = await _send(client)
    again = await _send(client)

    assert (first.response.status_code, first.budget_left, first.retries_spent) == (503, True, False)
    assert (again.response.status_code, again.attempts) == (200, 1)
    assert len(calls) == 4


async def test_the_shared_budget_bounds_the_attempts_of_a_request_and_its_client_retries():
    client, calls, _ = _client([503] * 10, retry_attempts=3)

    replies = [await _send(client) for _ in range(3)]

    assert [r.attempts for r in replies] == [3, 3, 1]
    assert [r.retries_spent for r in replies] == [False, True, False]  # the last: a single attempt
    assert len(calls) == 7


async def test_an_error_while_the_shared_budget_lasts_leaves_retrying_to_the_client():
    client, _, _ = _client([httpx.ConnectError("refused")] * 3, retry_attempts=3)

    with pytest.raises(UpstreamUnreachable) as raised:
        await _send(client)

    assert raised.value.headers == {"x-loopwarden-upstream-attempts": "3"}


async def test_a_client_retry_backs_off_longer_than_the_first_request():
    client, _, sleeps = _client([503] * 6, retry_attempts=3)

    await _send(client)
    await _send(client)

    assert sleeps == [0.5, 1.0, 4.0, 8.0]  # full jitter drawn at its top; 8 s is retry_max_delay


async def test_a_fast_failing_upstream_is_backed_off_one_doubling_longer():
    client, _, sleeps = _client([503, 503, 200], fault_seconds=FAST)

    await _send(client)

    assert sleeps == [1.0, 2.0]  # a slow upstream's: [0.5, 1.0]


async def test_a_refused_connection_is_a_fast_fault_too():
    client, _, sleeps = _client([httpx.ConnectError("refused"), 200], fault_seconds=FAST)

    await _send(client)

    assert sleeps == [1.0]


async def test_a_client_retry_to_a_fast_failing_upstream_backs_off_to_the_cap_sooner():
    client, _, sleeps = _client([503] * 6, retry_attempts=3, fault_seconds=FAST)

    await _send(client)
    await _send(client)

    assert sleeps == [1.0, 2.0, 8.0, 8.0]  # slow faults: [0.5, 1.0, 4.0, 8.0]


async def test_different_bodies_or_keys_are_different_requests():
    client, calls, _ = _client([503] * 12, retry_attempts=2)  # 4 shared

    for _ in range(2):
        await client.send("POST", "http://up/v1/chat/completions", [], b"{}")
        await client.send("POST", "http://up/v1/chat/completions", [], b'{"a": 1}')
        await client.send("POST", "http://up/v1/chat/completions", [("authorization", "Bearer other")], b"{}")

    assert len(calls) == 12  # each of the three its own 4


async def test_a_spent_shared_budget_is_logged_and_counted(log_records):
    metrics = Metrics()
    calls: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return httpx.Response(503, json={})

    async def sleep(seconds: float) -> None:
        return None

    settings = Settings(upstream="http://up/v1", retry_attempts=3)
    client = UpstreamClient(settings, httpx.MockTransport(handler), sleep=sleep, metrics=metrics)

    await _send(client)
    await _send(client)

    (record,) = [r for r in log_records if r.getMessage() == "upstream_retries_exhausted"]
    assert record.fields == {"attempts": 3, "shared": 6, "fault": "503"}
    assert metrics.registry.get_sample_value("loopwarden_upstream_attempts_total", {"outcome": "exhausted"}) == 1.0
