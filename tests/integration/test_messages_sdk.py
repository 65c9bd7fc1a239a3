"""The real anthropic SDK, pointed at the proxy, works exactly as against the Messages API."""

from __future__ import annotations

import json
import re

import anthropic
import httpx
import pytest

from tests.support.fake_messages import (
    Events,
    check_stream,
    checking_client,
    said,
    text,
    thinking,
    tool_use,
)

TASK = [{"role": "user", "content": "What is the weather in Paris?"}]
HEADERS = {"content-type": "application/json", "x-api-key": "sk-ant-provider", "anthropic-version": "2023-06-01"}


def client_for(proxy) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=proxy.url, api_key="sk-ant-provider", max_retries=0)


def test_create_gets_the_upstream_message(messages_proxy, anthropic_upstream):
    anthropic_upstream.script(said(text("It is sunny.")))

    message = client_for(messages_proxy).messages.create(model="claude-fake", max_tokens=100, messages=TASK)

    assert [block.text for block in message.content] == ["It is sunny."]
    sent = anthropic_upstream.requests[0]
    assert sent.path == "/v1/messages"
    assert sent.header("authorization") == "Bearer sk-ant-provider"  # how this SDK sends its api_key
    assert sent.header("anthropic-version")


def test_an_x_api_key_is_forwarded_as_sent(messages_proxy, anthropic_upstream):
    httpx.post(f"{messages_proxy.url}/v1/messages", json={"max_tokens": 5, "messages": TASK}, headers=HEADERS)

    sent = anthropic_upstream.requests[0]
    assert sent.header("x-api-key") == "sk-ant-provider"
    assert sent.header("anthropic-version") == "2023-06-01"


def test_a_well_behaved_reply_reaches_the_client_byte_for_byte(messages_proxy, anthropic_upstream):
    anthropic_upstream.script(said(thinking("Easy."), text("Sunny.")))
    body = json.dumps({"model": "claude-fake", "max_tokens": 100, "messages": TASK}).encode()

    reply = httpx.post(f"{messages_proxy.url}/v1/messages", content=body, headers=HEADERS)

    assert reply.status_code == 200
    assert anthropic_upstream.requests[0].body == body
    assert reply.json()["content"][1] == {"type": "text", "text": "Sunny."}


def test_a_well_behaved_stream_reaches_the_client_byte_for_byte(messages_proxy, anthropic_upstream):
    anthropic_upstream.script(said(thinking("Easy."), text("Sunny and warm."), stop_reason="end_turn"))
    payload = {"model": "claude-fake", "max_tokens": 100, "messages": TASK, "stream": True}
    upstream_bytes = httpx.post(  # what the fake sends for this request, asked directly
        anthropic_upstream.url + "/messages", json=payload, headers=HEADERS
    ).content
    anthropic_upstream.reset()
    anthropic_upstream.script(said(thinking("Easy."), text("Sunny and warm.")))

    reply = httpx.post(f"{messages_proxy.url}/v1/messages", json=payload, headers=HEADERS)

    check_stream(reply.content)
    assert _without_ids(reply.content) == _without_ids(upstream_bytes)


def _without_ids(raw: bytes) -> bytes:
    return re.sub(rb"msg_fake\d+", b"msg_x", raw)


def test_stream_helper_accumulates_the_message(messages_proxy, anthropic_upstream, sdk_streams):
    anthropic_upstream.script(said(thinking("Hmm."), text("Streaming works fine.")))
    client = checking_client(messages_proxy, sdk_streams)

    with client.messages.stream(model="claude-fake", max_tokens=100, messages=TASK) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()

    assert "".join(pieces) == "Streaming works fine."
    assert [b.type for b in final.content] == ["thinking", "text"]
    assert final.stop_reason == "end_turn"
    assert len(sdk_streams) == 1


async def test_async_client_streams_with_raw_events(messages_proxy, anthropic_upstream):
    anthropic_upstream.script(said(text("Async stream.")))
    client = anthropic.AsyncAnthropic(base_url=messages_proxy.url, api_key="sk-ant-provider", max_retries=0)

    stream = await client.messages.create(model="claude-fake", max_tokens=50, messages=TASK, stream=True)
    kinds = [event.type async for event in stream]

    assert kinds[0] == "message_start"
    assert kinds[-1] == "message_stop"
    await client.close()


def test_a_tool_loop_runs_through_the_proxy(messages_proxy, anthropic_upstream):
    tools = [
        {
            "name": "weather",
            "description": "Weather for a city",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        }
    ]
    anthropic_upstream.script(said(tool_use("weather", {"city": "Paris"})), said(text("It is 21 degrees.")))
    client = client_for(messages_proxy)
    messages: list = list(TASK)

    first = client.messages.create(model="claude-fake", max_tokens=100, messages=messages, tools=tools)
    messages.append({"role": "assistant", "content": first.content})
    call = next(b for b in first.content if b.type == "tool_use")
    messages.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "21C"}]})
    second = client.messages.create(model="claude-fake", max_tokens=100, messages=messages, tools=tools)

    assert first.stop_reason == "tool_use"
    assert call.input == {"city": "Paris"}
    assert second.content[0].text == "It is 21 degrees."
    assert len(anthropic_upstream.requests) == 2


def test_claude_codes_beta_query_and_headers_are_forwarded(messages_proxy, anthropic_upstream):
    headers = {**HEADERS, "anthropic-beta": "interleaved-thinking-2025-05-14,context-1m"}

    reply = httpx.post(
        f"{messages_proxy.url}/v1/messages?beta=true",
        json={"model": "claude-fake", "max_tokens": 10, "messages": TASK},
        headers=headers,
    )

    assert reply.status_code == 200
    assert anthropic_upstream.requests[0].query == "beta=true"
    assert anthropic_upstream.requests[0].header("anthropic-beta") == "interleaved-thinking-2025-05-14,context-1m"
    assert reply.headers["x-loopwarden-session"]


def test_a_bearer_token_is_forwarded_as_sent(messages_proxy, anthropic_upstream):
    client = anthropic.Anthropic(base_url=messages_proxy.url, auth_token="oauth-token", max_retries=0)

    client.messages.create(model="claude-fake", max_tokens=10, messages=TASK)

    assert anthropic_upstream.requests[0].header("authorization") == "Bearer oauth-token"


def test_count_tokens_passes_through(messages_proxy, anthropic_upstream):
    counted = client_for(messages_proxy).messages.count_tokens(model="claude-fake", messages=TASK)

    assert counted.input_tokens > 0
    assert anthropic_upstream.requests[0].path == "/v1/messages/count_tokens"


def test_an_upstream_error_reaches_the_sdk_as_its_error(messages_proxy, anthropic_upstream):
    from tests.support.fake_upstream import Json

    error = {"type": "error", "error": {"type": "invalid_request_error", "message": "max_tokens: required"}}
    anthropic_upstream.script(Json(error, status=400))

    with pytest.raises(anthropic.BadRequestError) as raised:
        client_for(messages_proxy).messages.create(model="claude-fake", max_tokens=10, messages=TASK)

    assert raised.value.body == error


def test_the_proxys_own_errors_take_anthropics_shape(make_proxy, anthropic_upstream):
    proxy = make_proxy(upstream=anthropic_upstream.url, max_body_bytes=200)
    long = [{"role": "user", "content": "x" * 500}]

    with pytest.raises(anthropic.APIStatusError) as created:
        client_for(proxy).messages.create(model="claude-fake", max_tokens=10, messages=long)
    with pytest.raises(anthropic.APIStatusError) as counted:
        client_for(proxy).messages.count_tokens(model="claude-fake", messages=long)

    for raised in (created.value, counted.value):
        assert raised.status_code == 413
        assert raised.body["type"] == "error"
        assert raised.body["error"]["type"] == "request_too_large"


def test_an_in_stream_error_ends_the_stream_as_an_error_event(messages_proxy, anthropic_upstream, sdk_streams):
    start = {
        "type": "message_start",
        "message": {
            "id": "m1",
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": "c",
            "usage": {"input_tokens": 1, "output_tokens": 1},
        },
    }
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    anthropic_upstream.script(Events([("message_start", start), ("error", overloaded)]))

    client = checking_client(messages_proxy, sdk_streams)
    with (
        pytest.raises(anthropic.APIStatusError, match="Overloaded"),
        client.messages.stream(model="claude-fake", max_tokens=10, messages=TASK) as stream,
    ):
        list(stream)


def test_claude_codes_probe_of_the_base_url_is_answered(messages_proxy):
    assert httpx.head(f"{messages_proxy.url}/").status_code == 200


def test_claude_codes_telemetry_goes_where_it_would_without_the_proxy(messages_proxy, anthropic_upstream):
    body = b'{"events":[{"event_type":"ClaudeCodeInternalEvent"}]}'
    headers = {"x-api-key": "sk-ant-client", "content-type": "application/json"}

    reply = httpx.post(f"{messages_proxy.url}/api/event_logging/batch", content=body, headers=headers)

    assert reply.status_code == 200
    sent = anthropic_upstream.requests[0]
    assert (sent.path, sent.body) == ("/api/event_logging/batch", body)  # the upstream's host, not below /v1
    assert sent.header("x-api-key") == "sk-ant-client"


@pytest.mark.parametrize("path", ["/api/event_logging/batch/more", "/api/event_logging/other", "/api/keys"])
def test_only_claude_codes_one_telemetry_path_is_forwarded(messages_proxy, anthropic_upstream, path):
    reply = httpx.post(f"{messages_proxy.url}{path}", json={}, headers={"anthropic-version": "2023-06-01"})

    assert reply.status_code == 404
    assert reply.json()["type"] == "error"
    assert anthropic_upstream.requests == []


def test_an_unknown_route_answers_an_anthropic_client_in_anthropics_shape(messages_proxy):
    reply = httpx.get(f"{messages_proxy.url}/v2/nothing", headers={"anthropic-version": "2023-06-01"})

    assert reply.status_code == 404
    assert reply.json()["error"]["type"] == "not_found_error"
