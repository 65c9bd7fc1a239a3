"""Two proxy processes over one Redis behave exactly like one: a session alternating between
them keeps its strikes, steps, fingerprints and ending."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.support.assertions import summary_of
from tests.support.fake_upstream import Json, chat_completion, tool_call
from tests.support.processes import free_port, spawn, wait_healthy

pytestmark = pytest.mark.slow  # starts loopwarden as a process of its own

TASK = [{"role": "user", "content": "Find the answer."}]
TOOLS = [{"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}]


def test_a_session_alternating_between_two_replicas_behaves_as_on_one(upstream, private_redis, processes):
    urls = []
    for _ in range(2):
        port = free_port()
        process = spawn(["serve", "--upstream", upstream.url, "--port", str(port), "--redis-url", private_redis.url])
        processes.append(process)
        urls.append(f"http://127.0.0.1:{port}")
    for url, process in zip(urls, processes, strict=True):
        wait_healthy(url, process)
    same_call = [Json(chat_completion(None, tool_calls=[tool_call("search", '{"q": "x"}', f"c{n}")])) for n in range(7)]
    upstream.script(*same_call, Json(chat_completion("Summary after the loop.")))

    headers = {"Authorization": "Bearer sk-p", "X-Session-Id": "shared-run"}
    replies, history = [], list(TASK)
    for turn in range(5):
        reply = httpx.post(
            f"{urls[turn % 2]}/v1/chat/completions",
            json={"model": "m", "messages": history, "tools": TOOLS},
            headers=headers,
            timeout=10,
        )
        replies.append(reply)
        if "x-loopwarden-terminated" in reply.headers:
            break
        message = reply.json()["choices"][0]["message"]  # the agent runs the call and goes on
        results = [{"role": "tool", "tool_call_id": c["id"], "content": f"page {turn}"} for c in message["tool_calls"]]
        history += [message, *results]

    assert replies[-1].headers["x-loopwarden-terminated"] == "loop"
    assert len(replies) == 5  # exactly as many turns as on one process: 2 clean, 2 warned, then the end
    inspected = httpx.get(f"{urls[0]}/v1/loopwarden/sessions/shared-run", headers=headers).json()
    assert inspected["termination"] == "loop"
    assert list(inspected["tool_call_fingerprints"].values()) == [4]
    again = httpx.post(f"{urls[1]}/v1/chat/completions", json={"model": "m", "messages": history}, headers=headers)
    assert summary_of(replies[-1].json()["choices"][0]["message"]["content"]) == "Summary after the loop."
    assert summary_of(json.loads(again.content)["choices"][0]["message"]["content"]) == "Summary after the loop."
    assert again.headers["x-loopwarden-terminated"] == "loop"
