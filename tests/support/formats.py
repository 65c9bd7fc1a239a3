"""The format fixture: one integration scenario, run over every wire format.

A scenario scripts neutral replies (``Turn``, ``Call``; every fake renders them in the format
it is asked in) and talks to the proxy through a :class:`Format`, which knows per format how a
client sends a request with the format's SDK (every stream it reads checked by the format's
strict validator), how the answer's text, tool calls and id read, how an agent hands tool
results back, and how the request the proxy sent upstream reads (tools offered, tool choice,
the tool results and the last words it ends with). The fixtures at the bottom (``wire_format``
over chat, responses, messages and gemini; ``fake``; ``proxy``) are imported by
``tests/integration/formats/conftest.py``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, ClassVar

import anthropic
import openai
import pytest
from google.genai import errors as genai_errors

from tests.support.fake_messages import FakeMessages, check_stream, checking_client, tool_use
from tests.support.fake_responses import FakeResponses
from tests.support.fake_upstream import FakeUpstream, Recorded, emptied, tool_call
from tests.support.format_base import TASK, Answer, Format, Sent, Tool, arguments_of, text_of
from tests.support.gemini_format import Gemini
from tests.support.proxy_server import RunningProxy
from tests.support.responses_clients import checked_sdk, create
from tests.support.socket_clients import socket_turn
from tests.support.turns import Call

__all__ = [
    "FORMATS",
    "REFUSED",
    "TASK",
    "Answer",
    "Format",
    "Sent",
    "Tool",
    "fake",
    "proxy",
    "status_of",
    "wire_format",
]


class Chat(Format):
    name = "chat"
    wire_name = "chat.completions"
    own_id = "chatcmpl-lw"
    calls_stop = "tool_calls"
    text_stop = "stop"
    none_choice = "none"
    request: ClassVar[dict[str, Any]] = {"model": "m"}

    def forced(self, name: str) -> dict[str, Any]:
        return {"type": "function", "function": {"name": name}}

    def _tool(self, tool: Tool) -> dict[str, Any]:
        return {"type": "function", "function": {"name": tool.name, "parameters": tool.parameters}}

    def asking_json(self, schema: dict[str, Any]) -> dict[str, Any]:
        return {"response_format": {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}}}

    def _send(self, proxy: RunningProxy, request: dict[str, Any], *, stream: bool, headers: dict[str, str]) -> Answer:
        client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-p", max_retries=0)
        raw = client.chat.completions.with_raw_response.create(stream=stream, extra_headers=headers, **request)
        if stream:
            ident, message, stop = _assembled(raw.parse())
        else:
            completion = raw.parse()
            ident, stop = completion.id, completion.choices[0].finish_reason
            message = completion.choices[0].message.model_dump(exclude_none=True)
        found = [
            Call(c["function"]["name"], arguments_of(c["function"]["arguments"]), c["id"])
            for c in message.get("tool_calls") or []
        ]
        return Answer(raw.headers, message.get("content") or "", found, ident, stop, [message])

    def _calling(self, call: Call) -> list[dict[str, Any]]:
        return [{"role": "assistant", "content": None, "tool_calls": [tool_call(call.name, call.raw, call.id)]}]

    def _returned(self, results: list[tuple[Call, str]]) -> list[dict[str, Any]]:
        return [{"role": "tool", "tool_call_id": call.id, "content": result} for call, result in results]

    def _results(self, payload: dict[str, Any]) -> list[tuple[str, str]]:
        trailing = []
        for message in reversed(payload["messages"]):
            if message.get("role") != "tool":
                break
            trailing.insert(0, (message["tool_call_id"], text_of(message["content"])))
        return trailing

    def _last(self, payload: dict[str, Any]) -> str:
        return text_of(payload["messages"][-1].get("content"))


def _assembled(chunks: Iterable[Any]) -> tuple[str, dict[str, Any], str]:
    """(id, message, finish reason) of a streamed chat completion, as a client assembles it."""
    message: dict[str, Any] = {"role": "assistant", "content": ""}
    ident, stop = "", ""
    calls: dict[int, dict[str, Any]] = {}
    for chunk in chunks:
        ident = chunk.id
        for choice in chunk.choices:
            message["content"] += choice.delta.content or ""
            for piece in choice.delta.tool_calls or []:
                call = calls.setdefault(
                    piece.index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
                )
                call["id"] = piece.id or call["id"]
                if piece.function is not None:
                    call["function"]["name"] += piece.function.name or ""
                    call["function"]["arguments"] += piece.function.arguments or ""
            stop = choice.finish_reason or stop
    if calls:
        message["tool_calls"] = [calls[index] for index in sorted(calls)]
    return ident, message, stop


class Responses(Format):
    name = "responses"
    wire_name = "responses"
    own_id = "resp_lw"
    calls_stop = "completed"
    text_stop = "completed"
    none_choice = "none"
    request: ClassVar[dict[str, Any]] = {"model": "m", "store": False}
    history_key: ClassVar[str] = "input"
    client_ids: ClassVar[list[tuple[dict[str, str], dict[str, Any], str]]] = [
        *Format.client_ids,
        ({"session_id": "codex-conv-1"}, {}, "codex-conv-1"),
        ({"conversation_id": "codex-conv-2"}, {}, "codex-conv-2"),
        ({}, {"client_metadata": {"session_id": "codex-conv-3"}, "prompt_cache_key": "k"}, "codex-conv-3"),
        ({"X-Session-Id": "explicit", "session_id": "codex-conv-4"}, {"prompt_cache_key": "k"}, "explicit"),
    ]

    def forced(self, name: str) -> dict[str, Any]:
        return {"type": "function", "name": name}

    def _tool(self, tool: Tool) -> dict[str, Any]:
        return {"type": "function", "name": tool.name, "parameters": tool.parameters}

    def asking_json(self, schema: dict[str, Any]) -> dict[str, Any]:
        return {"text": {"format": {"type": "json_schema", "name": "answer", "schema": schema}}}

    def _send(self, proxy: RunningProxy, request: dict[str, Any], *, stream: bool, headers: dict[str, str]) -> Answer:
        with checked_sdk(proxy.base_url) as (client, _):
            got, reply = create(client, stream, extra_headers=headers, **request)
        items = [item.model_dump(exclude_none=True) for item in reply.output]
        found = [
            Call(i["name"], arguments_of(i["arguments"]), i["call_id"]) for i in items if i["type"] == "function_call"
        ]
        return Answer(got, reply.output_text, found, reply.id, reply.status or "", items)

    def _calling(self, call: Call) -> list[dict[str, Any]]:
        return [{"type": "function_call", "call_id": call.id, "name": call.name, "arguments": call.raw}]

    def _returned(self, results: list[tuple[Call, str]]) -> list[dict[str, Any]]:
        return [{"type": "function_call_output", "call_id": call.id, "output": result} for call, result in results]

    def rejected(self) -> list[str]:
        assert isinstance(self.fake, FakeResponses)
        return self.fake.rejections

    def _results(self, payload: dict[str, Any]) -> list[tuple[str, str]]:
        trailing = []
        for item in reversed(payload["input"]):
            if item.get("type") != "function_call_output":
                break
            trailing.insert(0, (item["call_id"], text_of(item["output"])))
        return trailing

    def _last(self, payload: dict[str, Any]) -> str:
        item = payload["input"][-1]
        return text_of(item["output"] if item.get("type") == "function_call_output" else item.get("content"))


class ResponsesOverSocket(Responses):
    """The Responses API over the proxy's WebSocket (always streamed: a socket has no other way)."""

    name = "responses-websocket"
    always_streams = True

    def _send(self, proxy: RunningProxy, request: dict[str, Any], *, stream: bool, headers: dict[str, str]) -> Answer:
        turn = socket_turn(proxy.base_url, request, headers)
        reply = turn.response
        items = [item.model_dump(exclude_none=True) for item in reply.output]
        found = [
            Call(i["name"], arguments_of(i["arguments"]), i["call_id"]) for i in items if i["type"] == "function_call"
        ]
        return Answer(turn.headers, reply.output_text, found, reply.id, reply.status or "", items)


class ResponsesOverUpstreamSocket(ResponsesOverSocket):
    """The Responses API over the proxy's WebSocket, and the proxy over a WebSocket of its own to
    an upstream that speaks the API's WebSocket mode (the fake's resolved history is what the
    model saw: a call that goes on from the socket's memory carries only its new items)."""

    name = "responses-websocket-upstream"

    @staticmethod
    def streamed(sent: Recorded) -> bool:
        return sent.method == "WEBSOCKET" or Format.streamed(sent)  # on a socket every call streams

    def sent(self, index: int) -> Sent:
        payload = {**self.fake.requests[index].json(), "input": self.fake.served_history(index)}
        return Sent(
            payload, self._tools(payload), self._results(payload), self._last(payload), payload.get("tool_choice")
        )


class Messages(Format):
    name = "messages"
    wire_name = "messages"
    own_id = "msg_lw"
    calls_stop = "tool_use"
    text_stop = "end_turn"
    key: ClassVar[dict[str, str]] = {"x-api-key": "sk-ant"}
    none_choice: ClassVar[dict[str, str]] = {"type": "none"}
    request: ClassVar[dict[str, Any]] = {"model": "claude-fake", "max_tokens": 1000}
    client_ids: ClassVar[list[tuple[dict[str, str], dict[str, Any], str]]] = [
        *Format.client_ids,
        ({}, {"metadata": {"user_id": "user_abc_session_42"}}, "user_abc_session_42"),
        ({}, {"metadata": {"user_id": json.dumps({"device_id": "d", "session_id": "0fe37a73-3e74"})}}, "0fe37a73-3e74"),
        ({"X-Session-Id": "mine"}, {"metadata": {"user_id": "user_abc_session_42"}}, "mine"),
    ]

    def forced(self, name: str) -> dict[str, Any]:
        return {"type": "tool", "name": name}

    def task(self, text: str = TASK, *, system: str | None = None) -> list[dict[str, Any]]:
        assert system is None, "a Messages request carries its system prompt apart"
        return super().task(text)

    def _tool(self, tool: Tool) -> dict[str, Any]:
        return {"name": tool.name, "input_schema": tool.parameters}

    def asking_json(self, schema: dict[str, Any]) -> dict[str, Any]:
        return {"output_config": {"format": {"type": "json_schema", "schema": schema}}}

    def _send(self, proxy: RunningProxy, request: dict[str, Any], *, stream: bool, headers: dict[str, str]) -> Answer:
        streams: list[bytes] = []
        client = checking_client(proxy, streams)
        if stream:
            with client.messages.stream(extra_headers=headers, **request) as streaming:
                message = streaming.get_final_message()
                got: Mapping[str, str] = streaming.response.headers
        else:
            raw = client.messages.with_raw_response.create(extra_headers=headers, **request)
            message, got = raw.parse(), raw.headers
        for each in streams:
            check_stream(each)
        blocks = [block.model_dump(exclude_none=True) for block in message.content]
        text = "".join(b.get("text", "") for b in blocks if b["type"] == "text")
        found = [Call(b["name"], b["input"], b["id"]) for b in blocks if b["type"] == "tool_use"]
        return Answer(
            got, text, found, message.id, message.stop_reason or "", [{"role": "assistant", "content": blocks}]
        )

    def _calling(self, call: Call) -> list[dict[str, Any]]:
        assert isinstance(call.arguments, dict), "a Messages tool_use carries its input as an object"
        return [{"role": "assistant", "content": [tool_use(call.name, call.arguments, call.id)]}]

    def _returned(self, results: list[tuple[Call, str]]) -> list[dict[str, Any]]:
        blocks = [{"type": "tool_result", "tool_use_id": call.id, "content": result} for call, result in results]
        return [{"role": "user", "content": blocks}]

    def rejected(self) -> list[str]:
        assert isinstance(self.fake, FakeMessages)
        return self.fake.rejected

    def _results(self, payload: dict[str, Any]) -> list[tuple[str, str]]:
        content = payload["messages"][-1]["content"]
        blocks = content if isinstance(content, list) else []
        return [(b["tool_use_id"], text_of(b["content"])) for b in blocks if b.get("type") == "tool_result"]

    def _last(self, payload: dict[str, Any]) -> str:
        content = payload["messages"][-1]["content"]
        if isinstance(content, str):
            return content
        last = content[-1]
        return text_of(last["content"]) if last.get("type") == "tool_result" else text_of([last])


REFUSED = (openai.APIStatusError, anthropic.APIStatusError, genai_errors.APIError)
"""What each format's SDK raises for an error status."""


def status_of(error: BaseException) -> int:
    """The HTTP status of an SDK's error (``status_code``; google-genai's ``code``)."""
    return int(getattr(error, "status_code", None) or getattr(error, "code", 0))


FORMATS: dict[str, tuple[type[Format], str]] = {
    "chat": (Chat, "_upstream_server"),
    "responses": (Responses, "responses_server"),
    "messages": (Messages, "messages_server"),
    "responses-websocket": (ResponsesOverSocket, "responses_server"),
    "responses-websocket-upstream": (ResponsesOverUpstreamSocket, "socket_server"),
    "gemini": (Gemini, "gemini_server"),
}
"""Each format's client, and the session fixture of the fake that answers it."""


@pytest.fixture(params=list(FORMATS))
def wire_format(request: pytest.FixtureRequest) -> Iterator[Format]:
    """Each wire format in turn, with its fake upstream empty before and after the test."""
    kind, server = FORMATS[request.param]
    for upstream in emptied(request.getfixturevalue(server)):
        yield kind(upstream)


@pytest.fixture
def fake(wire_format: Format) -> FakeUpstream:
    """The fake upstream of the format under test (scripted with neutral replies)."""
    return wire_format.fake


@pytest.fixture
def proxy(make_proxy: Callable[..., RunningProxy], fake: FakeUpstream) -> RunningProxy:
    """A proxy with default settings in front of the format's fake."""
    return make_proxy(upstream=fake.url)
