"""The guards on /v1/messages where the format has its own behaviour (server tools pausing, stop
reasons, streamed thinking released before a nudge); the guard families common to every format
run in tests/integration/formats/test_guards.py."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.support.fake_messages import check_stream, said, streamed_message, thinking, tool_use

TOOLS = [
    {
        "name": "search",
        "description": "Search the web",
        "input_schema": {
            "type": "object",
            "properties": {"q": {"type": "string"}},
            "required": ["q"],
            "additionalProperties": False,
        },
    },
    {"name": "fetch", "input_schema": {"type": "object", "properties": {"url": {"type": "string"}}}},
]
TASK = [{"role": "user", "content": "How many people live in Lyon?"}]
HEADERS = {"x-api-key": "sk-ant", "anthropic-version": "2023-06-01"}


def post(proxy, payload: dict[str, Any], **headers: str) -> httpx.Response:
    return httpx.post(f"{proxy.url}/v1/messages", json=payload, headers={**HEADERS, **headers}, timeout=30)


def base(**extra: Any) -> dict[str, Any]:
    return {"model": "claude-fake", "max_tokens": 1000, "messages": TASK, **extra}


def test_pause_turn_reaches_the_client_untouched(messages_proxy, anthropic_upstream):
    server_call = {"type": "server_tool_use", "id": "srv_1", "name": "web_search", "input": {"query": "lyon"}}
    anthropic_upstream.script(said(server_call, stop_reason="pause_turn"))

    reply = post(messages_proxy, base())

    assert reply.json()["stop_reason"] == "pause_turn"
    assert reply.headers["x-loopwarden-interventions"] == "none"
    assert len(anthropic_upstream.requests) == 1


@pytest.mark.parametrize("stop", ["max_tokens", "refusal", "model_context_window_exceeded"])
def test_a_reply_cut_short_reaches_the_client_as_it_came(messages_proxy, anthropic_upstream, stop: str):
    anthropic_upstream.script(said(stop_reason=stop))

    reply = post(messages_proxy, base())

    assert reply.json()["stop_reason"] == stop
    assert len(anthropic_upstream.requests) == 1


def test_a_streamed_nudge_after_released_thinking_continues_one_message(make_proxy, anthropic_upstream, write_policies):
    proxy = make_proxy(
        upstream=anthropic_upstream.url,
        policies_dir=str(write_policies(default="streaming: {reasoning: relay}\n")),
    )
    anthropic_upstream.script(
        said(thinking("Let me search."), tool_use("search", {"query": "lyon"}, "toolu_1")),
        said(thinking("Fixing the input."), tool_use("search", {"q": "lyon"}, "toolu_2")),
    )

    reply = post(proxy, base(tools=TOOLS, stream=True))

    message = streamed_message(check_stream(reply.content))
    assert [b["type"] for b in message["content"]] == ["thinking", "thinking", "tool_use"]
    assert message["content"][2]["input"] == {"q": "lyon"}
    assert message["stop_reason"] == "tool_use"
