"""Guarded Messages streams: always one well-formed message, whatever was held, cut or replaced."""

from __future__ import annotations

import dataclasses
from typing import Any

import anthropic
import httpx
import pytest

from tests.support.assertions import summary_of
from tests.support.fake_messages import (
    Events,
    check_stream,
    judge_verdict,
    said,
    streamed_message,
    text,
    thinking,
    tool_use,
)

TOOLS = [{"name": "search", "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}}}]
TASK = [{"role": "user", "content": "Find Lyon's population."}]
AFTER_TOOLS = [
    *TASK,
    {"role": "assistant", "content": [tool_use("search", {"q": "lyon"}, "toolu_1")]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "522,250"}]},
]
HEADERS = {"x-api-key": "sk-ant", "anthropic-version": "2023-06-01"}


def streamed(proxy, session: str | None = None, **payload: Any) -> bytes:
    body = {"model": "claude-fake", "max_tokens": 500, "messages": TASK, "stream": True, **payload}
    headers = {**HEADERS, **({"X-Session-Id": session} if session else {})}
    with httpx.stream("POST", f"{proxy.url}/v1/messages", json=body, headers=headers, timeout=15) as response:
        return b"".join(response.iter_raw())


def test_keepalives_are_ping_events_while_the_judge_decides(make_proxy, anthropic_upstream):
    proxy = make_proxy(upstream=anthropic_upstream.url, stream_keepalive_secs=0.2)
    anthropic_upstream.judge = lambda request: dataclasses.replace(judge_verdict(request, True), delay=1.0)
    anthropic_upstream.script(said(thinking("Enough."), text("Done.")))

    raw = streamed(proxy, messages=AFTER_TOOLS, tools=TOOLS)

    events = check_stream(raw)
    assert raw.count(b"event: ping\n") >= 3
    assert raw.index(b"event: ping") < raw.index(b"event: message_start")  # held whole until the verdict
    assert b": keep-alive" not in raw
    assert streamed_message(events)["content"][-1] == text("Done.")


def test_an_ended_session_answers_a_stream_with_its_ending(make_proxy, anthropic_upstream, write_policies):
    proxy = make_proxy(upstream=anthropic_upstream.url, policies_dir=str(write_policies(default="max_steps: 1\n")))
    anthropic_upstream.script(said(text("Searching now."), tool_use("search", {"q": "lyon"}, "toolu_9")))
    first = streamed(proxy, "ended", messages=TASK, tools=TOOLS)
    anthropic_upstream.script(said(text("Found: 522,250. Missing: nothing.")))

    second = streamed(proxy, "ended", messages=AFTER_TOOLS, tools=TOOLS)

    check_stream(first)
    message = streamed_message(check_stream(second))
    assert [b["type"] for b in message["content"]] == ["text"]
    assert message["id"].startswith("msg_lw")


def test_a_stream_cut_midway_ends_with_an_error_event(messages_proxy, anthropic_upstream):
    start = {
        "type": "message_start",
        "message": {"id": "m", "type": "message", "role": "assistant", "content": [], "model": "c", "usage": {}},
    }
    block = {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
    delta = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Lyon has " * 20}}
    anthropic_upstream.script(
        Events([("message_start", start), ("content_block_start", block), ("content_block_delta", delta)], cut=True)
    )

    raw = streamed(messages_proxy)

    events = check_stream(raw)
    assert events[-1]["type"] == "error"
    assert events[-1]["error"]["type"] == "api_error"
    assert "broke off" in events[-1]["error"]["message"]


def test_unknown_events_and_block_types_pass_through(messages_proxy, anthropic_upstream):
    anthropic_upstream.script(said({"type": "future_block", "payload": 1}, text("Fine.")))

    events = check_stream(streamed(messages_proxy))

    assert [b["type"] for b in streamed_message(events)["content"]] == ["future_block", "text"]


def test_the_sdk_reads_a_stream_replaced_by_an_ending(make_proxy, anthropic_upstream, write_policies):
    proxy = make_proxy(upstream=anthropic_upstream.url, policies_dir=str(write_policies(default="max_steps: 1\n")))
    client = anthropic.Anthropic(base_url=proxy.url, api_key="sk-ant", max_retries=0)
    anthropic_upstream.summary = said(text("Summary."))
    client.messages.create(model="c", max_tokens=10, messages=TASK, tools=TOOLS, extra_headers={"X-Session-Id": "s1"})

    with client.messages.stream(
        model="c", max_tokens=10, messages=AFTER_TOOLS, tools=TOOLS, extra_headers={"X-Session-Id": "s1"}
    ) as stream:
        final = stream.get_final_message()

    assert summary_of(final.content[0].text) == "Summary."


@pytest.fixture
def tenant_proxy(make_proxy, anthropic_upstream, write_tenants):
    path = write_tenants({"team": "lw-team"}, provider_key="sk-ant-tenant")
    return make_proxy(upstream=anthropic_upstream.url, tenants_file=path)


@pytest.mark.parametrize("header", ["x-api-key", "authorization"])
def test_a_tenant_key_in_either_header_sends_the_tenants_key_in_x_api_key(tenant_proxy, anthropic_upstream, header):
    value = "lw-team" if header == "x-api-key" else "Bearer lw-team"
    body = {"model": "c", "max_tokens": 10, "messages": TASK}

    reply = httpx.post(f"{tenant_proxy.url}/v1/messages", json=body, headers={header: value, "anthropic-version": "1"})
    counted = httpx.post(f"{tenant_proxy.url}/v1/messages/count_tokens", json=body, headers={header: value})

    assert (reply.status_code, counted.status_code) == (200, 200)
    for sent in anthropic_upstream.requests:
        assert sent.header_values("x-api-key") == ["sk-ant-tenant"]
        assert sent.header("authorization") is None


def test_a_wrong_key_is_refused_in_anthropics_shape(tenant_proxy, anthropic_upstream):
    client = anthropic.Anthropic(base_url=tenant_proxy.url, api_key="wrong", max_retries=0)

    with pytest.raises(anthropic.AuthenticationError) as raised:
        client.messages.create(model="c", max_tokens=10, messages=TASK)
    with pytest.raises(anthropic.AuthenticationError):
        client.models.list()

    assert raised.value.body["error"]["type"] == "authentication_error"
    assert anthropic_upstream.requests == []


def test_the_sdk_reads_a_stream_that_pings_before_its_message(make_proxy, anthropic_upstream):
    proxy = make_proxy(upstream=anthropic_upstream.url, stream_keepalive_secs=0.1)
    anthropic_upstream.judge = lambda request: dataclasses.replace(judge_verdict(request, True), delay=0.5)
    anthropic_upstream.script(said(text("Done.")))
    client = anthropic.Anthropic(base_url=proxy.url, api_key="sk-ant", max_retries=0)

    with client.messages.stream(model="c", max_tokens=10, messages=AFTER_TOOLS, tools=TOOLS) as stream:
        final = stream.get_final_message()

    assert final.content[0].text == "Done."


def test_an_ending_after_released_thinking_continues_the_same_message(make_proxy, anthropic_upstream, write_policies):
    policy = "streaming: {reasoning: relay}\nreasoning_only_max_strikes: 2\n"
    proxy = make_proxy(upstream=anthropic_upstream.url, policies_dir=str(write_policies(default=policy)))
    anthropic_upstream.script(*[said(thinking(f"Hmm {n}.")) for n in range(5)])
    anthropic_upstream.summary = said(text("Found: nothing. Missing: an answer. Next: ask again."))

    message = streamed_message(check_stream(streamed(proxy, tools=TOOLS)))

    kinds = [b["type"] for b in message["content"]]
    assert kinds[-1] == "text"
    assert set(kinds[:-1]) == {"thinking"}
    assert len(kinds) >= 3  # the thinking of every attempt went out as it came
    assert message["content"][-1]["text"].endswith("Found: nothing. Missing: an answer. Next: ask again.")
    assert message["stop_reason"] == "end_turn"
