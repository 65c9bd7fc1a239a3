"""The format fixture: one integration scenario, run over every wire format.

A scenario scripts neutral replies (``Turn``, ``Call``; every fake renders them in the format
it is asked in) and talks to the proxy through a :class:`Format`, which knows per format how a
client sends a request with the format's SDK (every stream it reads checked by the format's
strict validator), how the answer's text, tool calls and id read, how an agent hands tool
results back, and how the request the proxy sent upstream reads (tools offered, tool choice,
the tool results and the last words it ends with). The fixtures at the bottom (``wire_format``
over chat, responses and messages; ``fake``; ``proxy``) are imported by
``tests/integration/formats/conftest.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, ClassVar

import openai
import pytest

from tests.support.fake_messages import FakeMessages, check_stream, checking_client, tool_use
from tests.support.fake_responses import FakeResponses
from tests.support.fake_upstream import Call, FakeUpstream, tool_call
from tests.support.format_base import TASK, Answer, Format, Sent, Tool, arguments_of, text_of
from tests.support.proxy_server import RunningProxy
from tests.support.responses_clients import checked_sdk, create

__all__ = ["FORMATS", "TASK", "Answer", "Format", "Sent", "Tool", "fake", "proxy", "wire_format"]


class Chat(Format):
    name = "chat"
    adapter = "chat.completions"
    own_id = "chatcmpl-lw"
    calls_stop = "tool_calls"
    text_stop = "stop"

    def _calling(self, call: Call) -> list[dict[str, Any]]:
        return [{"role": "assistant", "content": None, "tool_calls": [tool_call(call.name, call.raw, call.id)]}]

    none_choice = "none"

    def forced(self, name: str) -> dict[str, Any]:
        return {"type": "function", "function": {"name": name}}

    def ask(self, proxy, history=None, *, tools=(), tool_choice=None, stream=False, headers=None) -> Answer:
        client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-p", max_retries=0)
        request: dict[str, Any] = {
            "model": "m",
            "messages": history or self.task(),
            "extra_headers": dict(headers or {}),
        }
        if tools:
            request["tools"] = [
                {"type": "function", "function": {"name": t.name, "parameters": t.parameters}} for t in tools
            ]
        if tool_choice is not None:
            request["tool_choice"] = self.none_choice if tool_choice == "none" else self.forced(tool_choice)
        raw = client.chat.completions.with_raw_response.create(stream=stream, **request)
        if not stream:
            choice = raw.parse().choices[0]
            message = choice.message.model_dump(exclude_none=True)
            ident, stop = raw.parse().id, choice.finish_reason
        else:
            message, ident, stop = {"role": "assistant", "content": ""}, "", ""
            calls: dict[int, dict[str, Any]] = {}
            for chunk in raw.parse():
                ident = chunk.id
                for delta_choice in chunk.choices:
                    delta = delta_choice.delta
                    message["content"] += delta.content or ""
                    for piece in delta.tool_calls or []:
                        got = calls.setdefault(
                            piece.index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
                        )
                        got["id"] = piece.id or got["id"]
                        if piece.function is not None:
                            got["function"]["name"] += piece.function.name or ""
                            got["function"]["arguments"] += piece.function.arguments or ""
                    stop = delta_choice.finish_reason or stop
            if calls:
                message["tool_calls"] = [calls[i] for i in sorted(calls)]
        found = [
            Call(c["function"]["name"], arguments_of(c["function"]["arguments"]), c["id"])
            for c in message.get("tool_calls") or []
        ]
        return Answer(raw.headers, message.get("content") or "", found, ident, stop, [message])

    def handed_back(self, history, answer, results):
        back = [
            {"role": "tool", "tool_call_id": c.id, "content": r} for c, r in zip(answer.calls, results, strict=True)
        ]
        return [*history, *answer.native, *back]

    def _tools(self, payload):
        return [t["function"]["name"] for t in payload.get("tools") or []]

    def _results(self, payload):
        trailing = []
        for message in reversed(payload["messages"]):
            if message.get("role") != "tool":
                break
            trailing.insert(0, (message["tool_call_id"], text_of(message["content"])))
        return trailing

    def _last(self, payload):
        return text_of(payload["messages"][-1].get("content"))


class Responses(Format):
    name = "responses"
    adapter = "responses"
    own_id = "resp_lw"
    calls_stop = "completed"
    text_stop = "completed"

    def _calling(self, call: Call) -> list[dict[str, Any]]:
        return [{"type": "function_call", "call_id": call.id, "name": call.name, "arguments": call.raw}]

    none_choice = "none"

    def forced(self, name: str) -> dict[str, Any]:
        return {"type": "function", "name": name}

    def ask(self, proxy, history=None, *, tools=(), tool_choice=None, stream=False, headers=None) -> Answer:
        request: dict[str, Any] = {"model": "m", "input": history or self.task(), "store": False}
        if tools:
            request["tools"] = [{"type": "function", "name": t.name, "parameters": t.parameters} for t in tools]
        if tool_choice is not None:
            request["tool_choice"] = self.none_choice if tool_choice == "none" else self.forced(tool_choice)
        with checked_sdk(proxy.base_url) as (client, _):
            got, reply = create(client, stream, extra_headers=dict(headers or {}), **request)
        items = [item.model_dump(exclude_none=True) for item in reply.output]
        found = [
            Call(i["name"], arguments_of(i["arguments"]), i["call_id"]) for i in items if i["type"] == "function_call"
        ]
        return Answer(got, reply.output_text, found, reply.id, reply.status or "", items)

    def handed_back(self, history, answer, results):
        back = [
            {"type": "function_call_output", "call_id": c.id, "output": r}
            for c, r in zip(answer.calls, results, strict=True)
        ]
        return [*history, *answer.native, *back]

    def rejected(self) -> list[str]:
        assert isinstance(self.fake, FakeResponses)
        return self.fake.rejections

    def _tools(self, payload):
        return [t["name"] for t in payload.get("tools") or []]

    def _results(self, payload):
        trailing = []
        for item in reversed(payload["input"]):
            if item.get("type") != "function_call_output":
                break
            trailing.insert(0, (item["call_id"], text_of(item["output"])))
        return trailing

    def _last(self, payload):
        item = payload["input"][-1]
        return text_of(item["output"] if item.get("type") == "function_call_output" else item.get("content"))


class Messages(Format):
    name = "messages"
    adapter = "messages"
    own_id = "msg_lw"
    calls_stop = "tool_use"
    text_stop = "end_turn"

    def _calling(self, call: Call) -> list[dict[str, Any]]:
        return [{"role": "assistant", "content": [tool_use(call.name, call.arguments, call.id)]}]  # type: ignore[arg-type]

    key: ClassVar[dict[str, str]] = {"x-api-key": "sk-ant"}
    none_choice: ClassVar[dict[str, str]] = {"type": "none"}

    def forced(self, name: str) -> dict[str, Any]:
        return {"type": "tool", "name": name}

    def task(self, text: str = TASK, *, system: str | None = None) -> list[dict[str, Any]]:
        assert system is None, "a Messages request carries its system prompt apart"
        return [{"role": "user", "content": text}]

    def ask(self, proxy, history=None, *, tools=(), tool_choice=None, stream=False, headers=None) -> Answer:
        streams: list[bytes] = []
        client = checking_client(proxy, streams)
        request: dict[str, Any] = {"model": "claude-fake", "max_tokens": 1000, "messages": history or self.task()}
        if tools:
            request["tools"] = [{"name": t.name, "input_schema": t.parameters} for t in tools]
        if tool_choice is not None:
            request["tool_choice"] = self.none_choice if tool_choice == "none" else self.forced(tool_choice)
        if stream:
            with client.messages.stream(extra_headers=dict(headers or {}), **request) as streaming:
                message = streaming.get_final_message()
                got: Mapping[str, str] = streaming.response.headers
        else:
            raw = client.messages.with_raw_response.create(extra_headers=dict(headers or {}), **request)
            message, got = raw.parse(), raw.headers
        for each in streams:
            check_stream(each)
        blocks = [block.model_dump(exclude_none=True) for block in message.content]
        text = "".join(b.get("text", "") for b in blocks if b["type"] == "text")
        found = [Call(b["name"], b["input"], b["id"]) for b in blocks if b["type"] == "tool_use"]
        stop = message.stop_reason or ""
        return Answer(got, text, found, message.id, stop, [{"role": "assistant", "content": blocks}])

    def handed_back(self, history, answer, results):
        back = [
            {"type": "tool_result", "tool_use_id": c.id, "content": r}
            for c, r in zip(answer.calls, results, strict=True)
        ]
        return [*history, *answer.native, {"role": "user", "content": back}]

    def rejected(self) -> list[str]:
        assert isinstance(self.fake, FakeMessages)
        return self.fake.rejected

    def _tools(self, payload):
        return [t["name"] for t in payload.get("tools") or []]

    def _results(self, payload):
        content = payload["messages"][-1]["content"]
        blocks = content if isinstance(content, list) else []
        return [(b["tool_use_id"], text_of(b["content"])) for b in blocks if b.get("type") == "tool_result"]

    def _last(self, payload):
        content = payload["messages"][-1]["content"]
        if isinstance(content, str):
            return content
        last = content[-1]
        return text_of(last["content"]) if last.get("type") == "tool_result" else text_of([last])


FORMATS: dict[str, tuple[type[Format], str]] = {
    "chat": (Chat, "_upstream_server"),
    "responses": (Responses, "responses_server"),
    "messages": (Messages, "messages_server"),
}
"""Each format's client, and the session fixture of the fake that answers it."""


@pytest.fixture(params=list(FORMATS))
def wire_format(request: pytest.FixtureRequest) -> Iterator[Format]:
    """Each wire format in turn, with its fake upstream empty before and after the test."""
    kind, server = FORMATS[request.param]
    upstream: FakeUpstream = request.getfixturevalue(server)
    upstream.reset()
    yield kind(upstream)
    upstream.reset()


@pytest.fixture
def fake(wire_format: Format) -> FakeUpstream:
    """The fake upstream of the format under test (scripted with neutral replies)."""
    return wire_format.fake


@pytest.fixture
def proxy(make_proxy: Callable[..., RunningProxy], fake: FakeUpstream) -> RunningProxy:
    """A proxy with default settings in front of the format's fake."""
    return make_proxy(upstream=fake.url)
