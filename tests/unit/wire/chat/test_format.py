"""The chat-completions format: neutral turns in, chat completions out; its stream errors and judge dialect."""

from __future__ import annotations

import json

import pytest

from proxy.errors import UpstreamError
from proxy.exchange import Echo, Note, Reply, ReturnCalls, ToolCall, Usage
from proxy.goal.model import GOAL_TOOL, goal_tool
from proxy.wire.base import WireFormat
from proxy.wire.chat.format import CHAT_COMPLETIONS
from proxy.wire.chat.parse import parse_reply

CALLS = (
    ToolCall("c1", "search", '{"q": "lyon"}'),
    ToolCall("c2", "patch", "*** Begin Patch", "custom"),
)


def test_the_chat_completions_format_is_a_wire_format():
    wire: WireFormat = CHAT_COMPLETIONS

    assert wire.name == "chat.completions"
    assert wire.stream.trailer == b"data: [DONE]\n\n"


@pytest.mark.parametrize(
    ("turns", "messages"),
    [
        ((Note("Go on."),), [{"role": "user", "content": "Go on."}]),
        (
            (Echo(Reply("Done.", None, (), "stop", Usage())), Note("Really?")),
            [{"role": "assistant", "content": "Done."}, {"role": "user", "content": "Really?"}],
        ),
        (
            (ReturnCalls(Reply(None, None, CALLS, "tool_calls", Usage()), {"c1": "bad", "c2": "Not executed"}),),
            [
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "search", "arguments": '{"q": "lyon"}'}},
                        {"id": "c2", "type": "custom", "custom": {"name": "patch", "input": "*** Begin Patch"}},
                    ],
                },
                {"role": "tool", "tool_call_id": "c1", "content": "bad"},
                {"role": "tool", "tool_call_id": "c2", "content": "Not executed"},
            ],
        ),
    ],
)
def test_neutral_turns_render_as_chat_messages_appended_to_the_request(turns, messages):
    payload = {"model": "m", "messages": [{"role": "user", "content": "task"}], "top_k": 3}

    sent = json.loads(CHAT_COMPLETIONS.codec.render_request(payload, turns))

    assert sent == {**payload, "messages": [*payload["messages"], *messages]}


def test_the_request_parses_into_neutral_messages_tools_and_flags():
    payload = {
        "model": "m",
        "stream": True,
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "find"}, {"type": "image_url"}]},
            {
                "role": "assistant",
                "content": None,
                "reasoning_content": "search first",
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "search", "arguments": "{}"}},
                    {"id": "c2", "type": "custom", "custom": {"name": "patch", "input": "x"}},
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "found"},
        ],
        "tools": [
            {"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}},
            {"type": "custom", "custom": {"name": "patch"}},
        ],
        "functions": [{"name": "legacy"}],
    }

    conversation = CHAT_COMPLETIONS.codec.parse_request(payload)

    assert conversation.stream is True
    assert [(m.role, m.text, m.call_id) for m in conversation.messages] == [
        ("user", "find", None),
        ("assistant", "", None),
        ("tool", "found", "c1"),
    ]
    assert conversation.messages[1].reasoning == "search first"
    assert conversation.calls_by_id() == {
        "c1": ToolCall("c1", "search", "{}"),
        "c2": ToolCall("c2", "patch", "x", "custom"),
    }
    assert [(t.name, t.kind) for t in conversation.tools] == [
        ("search", "function"),
        ("patch", "custom"),
        ("legacy", "function"),
    ]
    assert conversation.tool_parameters() == {"search": {"type": "object"}, "legacy": {}}


def test_the_goal_tool_renders_as_a_function_tool_after_the_agents_own():
    payload = {"model": "m", "tools": [{"type": "function", "function": {"name": "search"}}]}

    tools = CHAT_COMPLETIONS.codec.with_tool(payload, goal_tool())["tools"]

    assert tools[0] == payload["tools"][0]
    assert tools[1]["type"] == "function"
    assert tools[1]["function"]["name"] == GOAL_TOOL
    assert tools[1]["function"]["parameters"]["required"] == ["action"]
    assert list(tools[1]["function"]) == ["name", "description", "parameters"]


def test_a_stream_error_is_an_event_in_openais_error_shape():
    event = CHAT_COMPLETIONS.stream.error_event(UpstreamError("The upstream model API broke off the stream."))

    assert event.startswith(b"data: ")
    assert json.loads(event[len(b"data: ") :])["error"]["type"] == UpstreamError.type


def test_the_judge_speaks_chat_completions_at_its_own_base_url():
    assert CHAT_COMPLETIONS.judge.url("http://judge:8000/v1/") == "http://judge:8000/v1/chat/completions"


def test_the_chat_judge_request_is_a_deterministic_capped_completion():
    body = json.loads(CHAT_COMPLETIONS.judge.request("be strict", "the task", model="m", max_tokens=200, schema=None))

    assert body == {
        "messages": [{"role": "system", "content": "be strict"}, {"role": "user", "content": "the task"}],
        "temperature": 0,
        "max_tokens": 200,
        "model": "m",
    }


def test_the_chat_judge_request_constrains_its_answer_to_the_schema_given():
    schema = {"type": "object"}
    body = json.loads(CHAT_COMPLETIONS.judge.request("s", "u", model=None, max_tokens=5, schema=schema))

    assert "model" not in body
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "completion_verdict", "strict": True, "schema": schema},
    }


def test_a_neutral_reply_renders_as_the_completion_an_upstream_sends():
    reply = Reply(
        "Searching.",
        "Think first.",
        (ToolCall("c1", "search", '{"q": 1}'), ToolCall("c2", "patch", "*** diff", kind="custom")),
        "tool_calls",
        Usage(10, 5),
        model="m",
    )

    body = CHAT_COMPLETIONS.codec.render_reply(reply)

    assert body["usage"] == {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    assert parse_reply(json.dumps(body).encode()) == reply
