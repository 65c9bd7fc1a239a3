"""Valid OpenAI reply and request shapes the guards must read right: several choices, custom
and legacy tool calls, audio, replies the provider cut short, ``stream_options: null``.
Each reaches the client as the upstream sent it, with no nudge."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from tests.support.fake_upstream import Json, Sse, chat_completion, streamed

pytestmark = pytest.mark.shared_proxy

TASK = [{"role": "user", "content": "How many people live in Lyon?"}]
SEARCH = {"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}
CHUNK = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}


def chunk(index: int, delta: dict, finish: str | None = None) -> dict:
    return {**CHUNK, "choices": [{"index": index, "delta": delta, "finish_reason": finish}]}


def post(proxy, **body) -> httpx.Response:
    return httpx.post(
        f"{proxy.base_url}/chat/completions",
        json={"model": "m", "messages": TASK, **body},
        headers={"Authorization": "Bearer sk-p"},
        timeout=30,
    )


def sdk(proxy) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.base_url, api_key="sk-p", max_retries=0)


def test_two_streamed_choices_with_tool_calls_are_not_merged(proxy, upstream):
    events = [chunk(i, {"role": "assistant", "content": None}) for i in (0, 1)]
    for i, (call_id, q) in enumerate((("call_a", "lyon"), ("call_b", "paris"))):
        head = {"index": 0, "id": call_id, "type": "function", "function": {"name": "search", "arguments": ""}}
        events += [chunk(i, {"tool_calls": [head]})]
    events += [
        chunk(i, {"tool_calls": [{"index": 0, "function": {"arguments": json.dumps({"q": q})}}]})
        for i, q in ((0, "lyon"), (1, "paris"))
    ]
    events += [chunk(0, {}, "tool_calls"), chunk(1, {}, "tool_calls")]
    upstream.script(Sse(events))

    stream = sdk(proxy).chat.completions.create(model="m", messages=TASK, tools=[SEARCH], n=2, stream=True)
    arguments: dict[int, str] = {0: "", 1: ""}
    for piece in stream:
        for choice in piece.choices:
            for call in choice.delta.tool_calls or []:
                arguments[choice.index] += call.function.arguments or ""

    assert arguments == {0: '{"q": "lyon"}', 1: '{"q": "paris"}'}
    assert len(upstream.requests) == 1


def test_two_streamed_structured_answers_are_each_valid(proxy, upstream):
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    events = [chunk(i, {"role": "assistant", "content": ""}) for i in (0, 1)]
    events += [chunk(0, {"content": '{"a":'}), chunk(1, {"content": '{"a":'}), chunk(0, {"content": " 1}"})]
    events += [chunk(1, {"content": " 2}"}), chunk(0, {}, "stop"), chunk(1, {}, "stop")]
    upstream.script(Sse(events))
    response_format = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}

    stream = sdk(proxy).chat.completions.create(
        model="m", messages=TASK, n=2, stream=True, response_format=response_format
    )
    texts: dict[int, str] = {0: "", 1: ""}
    for piece in stream:
        for choice in piece.choices:
            texts[choice.index] += choice.delta.content or ""

    assert texts == {0: '{"a": 1}', 1: '{"a": 2}'}
    assert len(upstream.requests) == 1


CUSTOM_TOOL = {"type": "custom", "custom": {"name": "code_exec", "description": "Runs Python."}}
CUSTOM_CALL = {"id": "call_1", "type": "custom", "custom": {"name": "code_exec", "input": "print(1)"}}


def test_a_custom_tool_call_passes_untouched(proxy, upstream):
    upstream.script(Json(chat_completion(None, tool_calls=[CUSTOM_CALL])))

    response = post(proxy, tools=[CUSTOM_TOOL])

    assert response.json()["choices"][0]["message"]["tool_calls"] == [CUSTOM_CALL]
    assert response.headers["x-loopwarden-interventions"] == "none"


def test_a_streamed_custom_tool_call_passes_untouched(proxy, upstream):
    upstream.script(streamed(chat_completion(None, tool_calls=[CUSTOM_CALL])))

    response = post(proxy, tools=[CUSTOM_TOOL], stream=True)

    calls = [
        call
        for line in response.text.splitlines()
        if line.startswith("data: {")
        for choice in json.loads(line[6:]).get("choices", [])
        for call in choice["delta"].get("tool_calls") or []
    ]
    assert calls[0]["custom"]["name"] == "code_exec"
    assert "".join(call["custom"]["input"] for call in calls) == "print(1)"
    assert len(upstream.requests) == 1


def test_different_custom_tool_calls_are_not_taken_for_a_loop(proxy, upstream):
    inputs = ["print(1)", "print(2)", "print(3)"]
    for code in inputs:
        call = {**CUSTOM_CALL, "custom": {"name": "code_exec", "input": code}}
        upstream.script(Json(chat_completion(None, tool_calls=[call])))
    session = {"Authorization": "Bearer sk-p", "X-Session-Id": "custom-calls"}
    body = {"model": "m", "messages": TASK, "tools": [CUSTOM_TOOL]}

    replies = [httpx.post(f"{proxy.base_url}/chat/completions", json=body, headers=session) for _ in inputs]

    assert [r.headers["x-loopwarden-interventions"] for r in replies] == ["none"] * 3
    assert len(upstream.requests) == 3


def test_a_legacy_function_call_is_not_an_empty_reply(proxy, upstream):
    body = chat_completion(None, finish_reason="function_call")
    body["choices"][0]["message"]["function_call"] = {"name": "search", "arguments": '{"q": "lyon"}'}
    upstream.script(Json(body))

    response = post(proxy, functions=[SEARCH["function"]])

    assert response.json()["choices"][0]["message"]["function_call"]["name"] == "search"
    assert response.headers["x-loopwarden-interventions"] == "none"


def test_a_streamed_legacy_function_call_is_not_an_empty_reply(proxy, upstream):
    events = [chunk(0, {"role": "assistant", "content": None})]
    events += [chunk(0, {"function_call": {"name": "search", "arguments": ""}})]
    events += [chunk(0, {"function_call": {"arguments": '{"q": "lyon"}'}}), chunk(0, {}, "function_call")]
    upstream.script(Sse(events))

    response = post(proxy, functions=[SEARCH["function"]], stream=True)

    deltas = [
        json.loads(line[6:])["choices"][0]["delta"]
        for line in response.text.splitlines()
        if line.startswith("data: {") and json.loads(line[6:])["choices"]
    ]
    arguments = "".join((d.get("function_call") or {}).get("arguments", "") for d in deltas)
    assert arguments == '{"q": "lyon"}'
    assert len(upstream.requests) == 1


def test_tool_calls_answering_legacy_functions_are_checked_against_them(proxy, upstream):
    call = {"id": "c1", "type": "function", "function": {"name": "search", "arguments": '{"q": "lyon"}'}}
    upstream.script(Json(chat_completion(None, tool_calls=[call])))

    response = post(proxy, functions=[SEARCH["function"]])

    assert response.json()["choices"][0]["message"]["tool_calls"] == [call]
    assert response.headers["x-loopwarden-interventions"] == "none"


def test_an_audio_reply_is_not_an_empty_reply(proxy, upstream):
    body = chat_completion(None)
    body["choices"][0]["message"]["audio"] = {"id": "audio_1", "data": "UklGR", "expires_at": 1, "transcript": "Hello"}
    upstream.script(Json(body))

    response = post(proxy, modalities=["text", "audio"], audio={"voice": "alloy", "format": "wav"})

    assert response.json()["choices"][0]["message"]["audio"]["transcript"] == "Hello"
    assert len(upstream.requests) == 1


def test_a_reply_cut_at_the_output_limit_reaches_the_client_as_it_is(proxy, upstream):
    upstream.script(Json(chat_completion("", finish_reason="length", reasoning="Thinking about Lyon…")))

    response = post(proxy, max_completion_tokens=50)

    assert response.json()["choices"][0]["finish_reason"] == "length"
    assert response.headers["x-loopwarden-interventions"] == "none"
    assert len(upstream.requests) == 1


def test_a_reply_stopped_by_the_content_filter_reaches_the_client_as_it_is(proxy, upstream):
    upstream.script(Json(chat_completion(None, finish_reason="content_filter")))

    response = post(proxy)

    assert response.json()["choices"][0]["finish_reason"] == "content_filter"
    assert len(upstream.requests) == 1


def test_stream_options_null_is_replaced_not_duplicated(proxy, upstream):
    upstream.script(streamed(chat_completion("Lyon: 522,250.")))

    post(proxy, stream=True, stream_options=None)

    sent = upstream.requests[0].body.decode()
    assert sent.count('"stream_options"') == 1
    assert json.loads(sent)["stream_options"] == {"include_usage": True}
