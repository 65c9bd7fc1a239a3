"""Upstream faults at the TCP level, through the fault proxy: cuts, resets, hangs, latency.

Every request has a client timeout and every test asserts how long the answer took, so a
regression shows up as a failure, not as a stuck suite.
"""

from __future__ import annotations

import httpx
import pytest

from tests.support.assertions import assert_openai_error
from tests.support.fake_upstream import Json, chat_completion
from tests.support.faultproxy import Cut, Hang, Latency, Reset
from tests.support.timed import Stopwatch, timed_post

AUTH = {"Authorization": "Bearer sk-p"}
BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
LONG_REPLY = chat_completion("x" * 20_000)  # headers fit in the first 2,000 bytes; the body does not


@pytest.fixture
def faulty(upstream, fault_proxy):
    """A fault proxy in front of the fake upstream."""
    return fault_proxy(upstream.port)


def post(proxy) -> tuple[httpx.Response, Stopwatch]:
    return timed_post(f"{proxy.base_url}/chat/completions", json=BODY, headers=AUTH)


@pytest.mark.parametrize(
    ("fault", "replies", "message"),
    [
        (Cut(after_bytes=0), [], "connection closed before a complete response."),
        (Cut(after_bytes=2_000), [Json(LONG_REPLY)], "connection closed before a complete response."),
        (Reset(after_bytes=0), [], "connection reset."),
        (Reset(after_bytes=2_000), [Json(LONG_REPLY)], "connection closed before a complete response."),
    ],
    ids=["closed-before-the-reply", "cut-mid-body", "reset-before-the-reply", "reset-mid-body"],
)
def test_a_broken_connection_is_a_502_and_the_post_is_not_sent_twice(
    make_proxy, upstream, faulty, fault, replies, message
):
    proxy = make_proxy(upstream=faulty.url, total_timeout=5.0)
    upstream.script(*replies)
    faulty.set(fault)

    response, watch = post(proxy)

    error = assert_openai_error(response, 502, "upstream_disconnected")
    assert error["message"].endswith(message)
    assert len(upstream.requests) == 1
    assert watch.elapsed < watch.scaled(5.0)


def test_a_reset_is_retried_when_retry_after_send_is_on(make_proxy, upstream, faulty):
    proxy = make_proxy(upstream=faulty.url, total_timeout=5.0, retry_after_send=True, retry_attempts=2)
    faulty.set(Reset(after_bytes=0))
    upstream.script(Json(chat_completion("first")))

    response, _ = post(proxy)

    assert response.status_code == 502  # every attempt met the reset
    assert faulty.accepted == 2
    assert len(upstream.requests) == 2


def test_latency_under_the_deadline_is_a_200(make_proxy, upstream, faulty):
    proxy = make_proxy(upstream=faulty.url, total_timeout=5.0)
    faulty.set(Latency(0.3))
    upstream.script(Json(chat_completion("slow but fine")))

    response, watch = post(proxy)

    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"] == "slow but fine"
    assert 0.6 <= watch.elapsed < watch.scaled(5.0)  # one chunk each way, each delayed
    assert response.headers["x-loopwarden-upstream-attempts"] == "1"


def test_latency_over_the_deadline_is_a_504_at_the_deadline(make_proxy, upstream, faulty):
    proxy = make_proxy(upstream=faulty.url, total_timeout=1.0)
    faulty.set(Latency(3.0))

    response, watch = post(proxy)

    assert_openai_error(response, 504, "upstream_timeout")
    assert watch.elapsed < 1.0 + watch.scaled(1.0)


def test_a_tcp_hang_is_a_504_within_the_deadline_and_nothing_reaches_the_upstream(make_proxy, upstream, faulty):
    proxy = make_proxy(upstream=faulty.url, total_timeout=1.0)
    faulty.set(Hang())

    response, watch = post(proxy)

    assert_openai_error(response, 504, "upstream_timeout")
    assert watch.elapsed < 1.0 + watch.scaled(1.0)
    assert upstream.requests == []
