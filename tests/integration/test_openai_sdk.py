"""The real openai SDK, pointed at the proxy, works exactly as against the model API."""

from __future__ import annotations

import json
import time

import openai
import pytest

from tests.support.fake_upstream import Json, Sse, chat_completion, stream_chunks, tool_call
from tests.support.timed import slowdown

pytestmark = pytest.mark.shared_proxy

MESSAGES = [{"role": "user", "content": "What is the weather in Paris?"}]


def test_sync_client_gets_the_upstream_completion(proxy, upstream):
    upstream.script(Json(chat_completion("It is sunny.")))
    client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-provider")

    completion = client.chat.completions.create(model="fake-model", messages=MESSAGES)

    assert completion.choices[0].message.content == "It is sunny."
    assert upstream.requests[0].path == "/v1/chat/completions"


async def test_async_client_gets_the_upstream_completion(proxy, upstream):
    upstream.script(Json(chat_completion("Async sunshine.")))
    client = openai.AsyncOpenAI(base_url=proxy.base_url, api_key="sk-provider")

    completion = await client.chat.completions.create(model="fake-model", messages=MESSAGES)

    assert completion.choices[0].message.content == "Async sunshine."
    await client.close()


def test_sync_stream_arrives_chunk_by_chunk(proxy, upstream):
    upstream.script(Sse(stream_chunks("Streaming works fine.")))
    client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-provider")

    stream = client.chat.completions.create(model="fake-model", messages=MESSAGES, stream=True)
    pieces = [chunk.choices[0].delta.content for chunk in stream if chunk.choices[0].delta.content]

    assert "".join(pieces) == "Streaming works fine."
    assert len(pieces) >= 3


async def test_async_stream_arrives_chunk_by_chunk(proxy, upstream):
    upstream.script(Sse(stream_chunks("Async streaming.")))
    client = openai.AsyncOpenAI(base_url=proxy.base_url, api_key="sk-provider")

    stream = await client.chat.completions.create(model="fake-model", messages=MESSAGES, stream=True)
    pieces = [chunk.choices[0].delta.content async for chunk in stream if chunk.choices[0].delta.content]

    assert "".join(pieces) == "Async streaming."
    await client.close()


def test_unknown_request_fields_reach_upstream_untouched(proxy, upstream):
    client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-provider")

    client.chat.completions.create(
        model="fake-model",
        messages=MESSAGES,
        extra_body={"vendor_knob": {"nested": [1, 2.50, "x"]}, "top_k": 3},
    )

    sent = upstream.requests[0].json()
    assert sent["vendor_knob"] == {"nested": [1, 2.5, "x"]}
    assert sent["top_k"] == 3


def test_request_body_bytes_are_forwarded_verbatim(proxy, upstream):
    import httpx

    raw = b'{"model":"fake-model",  "messages":[{"role":"user","content":"caf\\u00e9"}],"n":1.0}'
    httpx.post(f"{proxy.base_url}/chat/completions", content=raw, headers={"Authorization": "Bearer sk-p"})

    assert upstream.requests[0].body == raw


def test_two_step_tool_loop_reaches_upstream_unchanged(proxy, upstream):
    upstream.script(
        Json(chat_completion(None, tool_calls=[tool_call("get_weather", '{"city": "Paris"}', "call_42")])),
        Json(chat_completion("It is 21 degrees in Paris.")),
    )
    client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-provider")
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]
    messages: list = list(MESSAGES)

    first = client.chat.completions.create(model="fake-model", messages=messages, tools=tools)
    call = first.choices[0].message.tool_calls[0]
    messages.append(first.choices[0].message.model_dump(exclude_none=True))
    messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temp_c": 21})})
    second = client.chat.completions.create(model="fake-model", messages=messages, tools=tools)

    assert call.function.name == "get_weather"
    assert second.choices[0].message.content == "It is 21 degrees in Paris."
    sent = upstream.requests[1].json()
    assert sent["messages"] == messages
    assert sent["tools"] == tools


def test_reply_carries_only_loopwarden_headers_in_addition(proxy, upstream):
    import httpx

    upstream.script(Json(chat_completion(), headers={"x-request-id": "req-123", "openai-processing-ms": "5"}))
    response = httpx.post(
        f"{proxy.base_url}/chat/completions",
        json={"model": "m", "messages": MESSAGES},
        headers={"Authorization": "Bearer sk-p"},
    )

    assert response.headers["x-request-id"] == "req-123"
    assert response.headers["openai-processing-ms"] == "5"
    assert response.headers["x-loopwarden-upstream-attempts"] == "1"


@pytest.mark.parametrize("stream", [False, True])
def test_client_key_is_forwarded_without_tenants_file(proxy, upstream, stream):
    upstream.script(Sse(stream_chunks("ok")) if stream else Json(chat_completion()))
    client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-my-provider-key")

    result = client.chat.completions.create(model="fake-model", messages=MESSAGES, stream=stream)
    if stream:
        list(result)

    assert upstream.requests[0].header_values("authorization") == ["Bearer sk-my-provider-key"]


@pytest.mark.timeout(300)  # its pace stretches with the machine's slowdown, and so does its length
def test_stream_chunks_reach_the_client_before_the_upstream_finishes(proxy, upstream):
    pace = slowdown()  # words spaced by the machine's slowdown, so its load cannot bunch them
    upstream.script(Sse(stream_chunks("one two three four", pieces=4), delay=0.4 * pace))
    client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-provider")

    started = time.monotonic()
    stream = client.chat.completions.create(model="fake-model", messages=MESSAGES, stream=True)
    arrivals = [time.monotonic() - started for chunk in stream if chunk.choices and chunk.choices[0].delta.content]

    assert arrivals[0] < 0.5 * pace  # the first words arrive while the upstream is still writing
    assert arrivals[-1] - arrivals[0] >= 0.8 * pace  # and the rest follow as they are produced
