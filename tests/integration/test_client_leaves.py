"""A client that hangs up on a non-streamed call cancels it, as a streamed one does.

The upstream stops generating at once instead of at its read timeout, no nudge or judge
call follows, and what the call used is still recorded in the session.
"""

from __future__ import annotations

import time

import httpx
import pytest

from tests.integration.test_loop_guards import TOOLS
from tests.support.fake_upstream import Json, chat_completion, tool_call
from tests.support.timed import scaled
from tests.support.waiting import wait_for

AUTH = {"Authorization": "Bearer sk-p"}
TASK = [{"role": "user", "content": "How many people live in Lyon?"}]
AFTER_TOOLS = [
    *TASK,
    {"role": "assistant", "content": None, "tool_calls": [tool_call("search", '{"q": "Lyon"}', "c0")]},
    {"role": "tool", "tool_call_id": "c0", "content": "Lyon: 522,250 inhabitants (2021)."},
]


def leave_after(proxy, seconds: float, body: dict, session: str) -> float:
    """Send a non-streamed call and hang up after ``seconds``; when the client left."""
    headers = {**AUTH, "X-Session-Id": session}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{proxy.base_url}/chat/completions", json=body, headers=headers, timeout=seconds)
    return time.monotonic()


def wait_for_hangup(proxy, upstream) -> None:
    """Until the upstream saw the proxy hang up and the proxy is done with the request: after
    that, nothing the proxy does for the call that was left can reach the upstream."""
    wait_for(lambda: upstream.hangups and not proxy.readiness.in_flight)


def test_a_client_leaving_a_non_streamed_call_cancels_the_upstream_call(proxy, upstream):
    upstream.script(Json(chat_completion("A very slow answer."), delay=5))

    left = leave_after(proxy, 0.3, {"model": "m", "messages": TASK}, "non-stream-leaver")

    wait_for_hangup(proxy, upstream)
    assert upstream.hangups
    assert upstream.hangups[0] - left < scaled(1.0)
    assert proxy.readiness.in_flight == 0


def test_a_cancelled_call_still_records_its_step_and_prompt(proxy, upstream):
    upstream.script(Json(chat_completion("A very slow answer."), delay=5))

    leave_after(proxy, 0.3, {"model": "m", "messages": TASK}, "cancelled-usage")
    wait_for_hangup(proxy, upstream)

    assert proxy.readiness.in_flight == 0
    session = httpx.get(f"{proxy.base_url}/loopwarden/sessions/cancelled-usage", headers=AUTH).json()
    assert session["steps"] == 1
    assert session["tokens"]["prompt"] > 0


def test_no_judge_call_follows_a_client_that_left(proxy, upstream):
    upstream.script(Json(chat_completion("Done."), delay=0.8))  # a short answer after tools: judged

    leave_after(proxy, 0.3, {"model": "m", "messages": AFTER_TOOLS, "tools": TOOLS}, "left-before-judge")
    wait_for_hangup(proxy, upstream)

    assert upstream.judge_requests == []


def test_no_nudge_follows_a_client_that_left(proxy, upstream):
    upstream.script(Json(chat_completion(""), delay=0.8))  # an empty reply: nudged

    leave_after(proxy, 0.3, {"model": "m", "messages": TASK}, "left-before-nudge")
    wait_for_hangup(proxy, upstream)

    assert len(upstream.requests) == 1


def test_a_client_leaving_a_pass_through_call_before_its_answer_cancels_it(proxy, upstream):
    upstream.script(Json({"object": "response", "output": []}, delay=5))  # a non-streamed response

    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{proxy.base_url}/responses", json={"model": "m", "input": "hi"}, headers=AUTH, timeout=0.3)
    left = time.monotonic()

    wait_for_hangup(proxy, upstream)
    assert upstream.hangups
    assert upstream.hangups[0] - left < scaled(1.0)
    assert proxy.readiness.in_flight == 0
