"""Parallel calls of one session over real HTTP, on both stores: budgets cannot overshoot,
and exactly one request produces the session's ending."""

from __future__ import annotations

import asyncio
import uuid

import httpx
import pytest

from tests.support.assertions import summary_of
from tests.support.fake_upstream import Json, chat_completion

PARALLEL = 20
MESSAGES = [{"role": "user", "content": "Look this up."}]
SUMMARY_MARK = b"The session is ending because"


@pytest.fixture(params=["memory", "redis"])
def store_settings(request, redis_url) -> dict[str, str]:
    return {"redis_url": redis_url} if request.param == "redis" else {}


def fire(proxy, session: str, n: int = PARALLEL, **extra) -> list[httpx.Response]:
    """``n`` requests of one session at once."""

    async def all_at_once() -> list[httpx.Response]:
        limits = httpx.Limits(max_connections=n)
        async with httpx.AsyncClient(base_url=proxy.base_url, timeout=30, limits=limits) as client:
            return await asyncio.gather(
                *(
                    client.post(
                        "/chat/completions",
                        json={"model": "m", "messages": MESSAGES, **extra},
                        headers={"Authorization": "Bearer sk-p", "X-Session-Id": session},
                    )
                    for _ in range(n)
                )
            )

    return asyncio.run(all_at_once())


def slow_replies(n: int) -> list[Json]:
    """Replies that take long enough for every parallel request to be in flight at once."""
    return [Json(chat_completion("Found it."), delay=0.3) for _ in range(n)]


def summary_calls(upstream) -> int:
    return sum(1 for request in upstream.requests if SUMMARY_MARK in request.body)


def test_parallel_calls_make_exactly_max_steps_upstream_calls_the_summary_included(
    make_proxy, upstream, write_policies, store_settings
):
    proxy = make_proxy(policies_dir=str(write_policies(default="max_steps: 10\n")), **store_settings)
    upstream.script(*slow_replies(PARALLEL + 1))

    replies = fire(proxy, f"steps-{uuid.uuid4().hex}")

    assert [r.status_code for r in replies] == [200] * PARALLEL
    assert len(upstream.requests) - summary_calls(upstream) == 9  # the last step is the ending's
    assert summary_calls(upstream) == 1
    ended = [r for r in replies if r.headers.get("x-loopwarden-terminated") == "budget_steps"]
    assert len(ended) == PARALLEL - 9


def test_parallel_requests_that_end_a_session_all_answer_with_the_one_ending_made(
    make_proxy, upstream, write_policies, store_settings
):
    proxy = make_proxy(policies_dir=str(write_policies(default="max_steps: 2\n")), **store_settings)
    upstream.script(*slow_replies(2))

    replies = fire(proxy, f"ending-{uuid.uuid4().hex}", n=10)

    ended = [
        summary_of(r.json()["choices"][0]["message"]["content"])
        for r in replies
        if "x-loopwarden-terminated" in r.headers
    ]
    assert summary_calls(upstream) == 1
    assert ended == ["Found it."] * 9  # the model's summary everywhere, no local one ("I have to stop here")
    assert 'answer="stored"' in httpx.get(f"{proxy.metrics_url}/metrics").text


def test_parallel_retries_cannot_overshoot_the_steps_either(make_proxy, upstream, write_policies, store_settings):
    proxy = make_proxy(policies_dir=str(write_policies(default="max_steps: 10\n")), **store_settings)
    empty = [Json(chat_completion(None), delay=0.3) for _ in range(3 * PARALLEL)]  # every reply asks for a nudge
    upstream.script(*empty)

    replies = fire(proxy, f"retries-{uuid.uuid4().hex}")

    assert [r.status_code for r in replies] == [200] * PARALLEL
    assert len(upstream.requests) - summary_calls(upstream) == 9
    assert summary_calls(upstream) == 1


def test_parallel_calls_over_a_token_budget_run_one_summary_call(make_proxy, upstream, write_policies, store_settings):
    policy = "budgets: {max_tokens: 100, reserve_tokens: 10}\nfinalize: {max_tokens: 20}\n"
    proxy = make_proxy(policies_dir=str(write_policies(default=policy)), **store_settings)
    upstream.script(*slow_replies(PARALLEL + 1))

    replies = fire(proxy, f"tokens-{uuid.uuid4().hex}", max_tokens=10)

    agent_calls = len(upstream.requests) - summary_calls(upstream)
    assert [r.status_code for r in replies] == [200] * PARALLEL
    assert summary_calls(upstream) == 1
    assert agent_calls == sum(1 for r in replies if "x-loopwarden-terminated" not in r.headers)
    assert agent_calls >= 1


def inspect(proxy, session: str) -> httpx.Response:
    return httpx.get(f"{proxy.base_url}/loopwarden/sessions/{session}", headers={"Authorization": "Bearer sk-p"})


@pytest.mark.parametrize("status", [400, 401])
@pytest.mark.parametrize("policy", ["{}\n", "budgets: {max_tokens: 100000}\n"])
def test_a_call_the_upstream_refuses_leaves_no_session(
    make_proxy, upstream, write_policies, store_settings, status, policy
):
    proxy = make_proxy(policies_dir=str(write_policies(default=policy)), **store_settings)
    upstream.script(Json({"error": {"message": "no", "type": "invalid_request_error"}}, status=status))
    session = f"refused-{uuid.uuid4().hex}"

    response = httpx.post(
        f"{proxy.base_url}/chat/completions",
        json={"model": "m", "messages": MESSAGES},
        headers={"Authorization": "Bearer sk-p", "X-Session-Id": session},
    )

    assert response.status_code == status
    assert inspect(proxy, session).status_code == 404


def test_a_call_the_upstream_refuses_gives_its_step_back(make_proxy, upstream, write_policies, store_settings):
    proxy = make_proxy(policies_dir=str(write_policies(default="max_steps: 2\n")), **store_settings)
    upstream.script(Json({"error": {"message": "no", "type": "invalid_request_error"}}, status=400))
    session = f"retry-{uuid.uuid4().hex}"
    post = {
        "json": {"model": "m", "messages": MESSAGES},
        "headers": {"Authorization": "Bearer sk-p", "X-Session-Id": session},
    }

    refused = httpx.post(f"{proxy.base_url}/chat/completions", **post)
    answered = httpx.post(f"{proxy.base_url}/chat/completions", **post)

    assert refused.status_code == 400
    assert answered.status_code == 200
    assert "x-loopwarden-terminated" not in answered.headers
    assert inspect(proxy, session).json()["steps"] == 1
