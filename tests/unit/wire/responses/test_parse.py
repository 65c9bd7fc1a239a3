"""Reading the Responses API: requests into the neutral conversation, responses into a Reply."""

from __future__ import annotations

import json

import pytest

from proxy.exchange import Message, ToolCall, Usage
from proxy.wire.responses.format import RESPONSES
from proxy.wire.responses.parse import ENCRYPTED_REASONING, parse_conversation, parse_reply
from tests.support.fake_responses import custom_call, function_call, message, reasoning, response


def _reply(body: dict) -> object:
    reply = parse_reply(json.dumps(body).encode())
    assert reply is not None
    return reply


def test_a_string_input_is_one_user_turn_after_the_instructions():
    conversation = parse_conversation({"model": "m", "instructions": "Be brief.", "input": "Fix the bug."})

    assert conversation.messages == [Message("system", "Be brief."), Message("user", "Fix the bug.")]
    assert conversation.model == "m"


def test_input_items_become_turns_with_calls_grouped_into_one_assistant_turn():
    items = [
        {"role": "developer", "content": "Rules."},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Find X."}]},
        reasoning("Think about X."),
        message("Let me look.", phase="commentary"),
        function_call("search", '{"q": "X"}', "c1"),
        custom_call("apply_patch", "*** Begin Patch", "c2"),
        {"type": "function_call_output", "call_id": "c1", "output": "found X"},
        {"type": "custom_tool_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "patched"}]},
        {"type": "item_reference", "id": "msg_123"},
        {"type": "web_search_call", "id": "ws_1", "status": "completed"},
        {"type": "some_future_item", "payload": 1},
    ]

    messages = parse_conversation({"input": items}).messages

    assert messages == [
        Message("developer", "Rules."),
        Message("user", "Find X."),
        Message(
            "assistant",
            "Let me look.",
            (ToolCall("c1", "search", '{"q": "X"}'), ToolCall("c2", "apply_patch", "*** Begin Patch", "custom")),
            None,
            "Think about X.",
        ),
        Message("tool", "found X", (), "c1"),
        Message("tool", "patched", (), "c2"),
    ]


def test_function_custom_and_namespaced_tools_are_offered_and_their_schemas_declared():
    schema = {"type": "object", "properties": {"q": {"type": "string"}}}
    payload = {
        "tools": [
            {"type": "function", "name": "search", "parameters": schema, "description": "Search."},
            {"type": "custom", "name": "apply_patch"},
            {"type": "namespace", "name": "mcp", "tools": [{"type": "function", "name": "read", "parameters": schema}]},
            {"type": "web_search"},
        ]
    }

    tools = parse_conversation(payload).tools

    assert [(t.name, t.kind) for t in tools] == [
        ("search", "function"),
        ("apply_patch", "custom"),
        ("mcp.read", "function"),
    ]
    assert RESPONSES.codec.declared_schemas(payload) == [
        ("tools[0].parameters", "search", schema),
        ("tools[2].tools[0].parameters", "mcp.read", schema),
    ]


def test_a_namespaced_call_is_named_like_its_tool():
    reply = _reply(response(function_call("read", "{}", namespace="mcp")))

    assert reply.tool_calls == (ToolCall("call_1", "mcp.read", "{}"),)


def test_text_format_json_schema_is_the_output_contract_and_asks_for_a_json_answer():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    payload = {"text": {"format": {"type": "json_schema", "name": "x", "schema": schema}}}

    assert parse_conversation(payload).output_schema == schema
    assert RESPONSES.codec.wants_structured_output(payload)
    assert RESPONSES.codec.wants_structured_output({"text": {"format": {"type": "json_object"}}})
    assert not RESPONSES.codec.wants_structured_output({"text": {"format": {"type": "text"}}})
    assert not RESPONSES.codec.wants_structured_output({"text": {"verbosity": "low"}})


@pytest.mark.parametrize(
    ("fields", "continues"),
    [
        ({"input": "Fix the bug."}, False),
        ({"input": "Go on.", "previous_response_id": "resp_1"}, True),
        ({"input": [{"type": "item_reference", "id": "msg_1"}, {"role": "user", "content": "Go on."}]}, True),
        ({"input": "Go on.", "conversation": "conv_1"}, True),
        ({"input": "Go on.", "conversation": {"id": "conv_1"}}, True),
        ({"input": [{"role": "user", "content": "Hi."}, {"role": "assistant", "content": "Hello."}]}, True),
        ({"input": "Go on.", "previous_response_id": None, "conversation": ""}, False),
    ],
    ids=[
        "new",
        "previous-response",
        "item-reference",
        "conversation",
        "conversation-object",
        "assistant-turn",
        "empty",
    ],
)
def test_a_request_continues_a_conversation_when_it_builds_on_history_held_anywhere(fields, continues):
    assert parse_conversation({"model": "m", **fields}).continues is continues


def test_stream_and_max_output_tokens_are_read():
    conversation = parse_conversation({"input": "x", "stream": True, "max_output_tokens": 300})

    assert conversation.stream
    assert conversation.output_cap == ("max_output_tokens", 300)


@pytest.mark.parametrize(
    ("output", "status", "incomplete", "expected"),
    [
        ([message("Done.")], "completed", None, "answer"),
        ([reasoning("hmm"), function_call("f", "{}")], "completed", None, "tool turn"),
        ([], "completed", None, "empty"),
        ([message("  ")], "completed", None, "empty"),
        ([reasoning("hmm")], "completed", None, "reasoning-only"),
        ([reasoning()], "completed", None, "reasoning-only"),
        ([message("No.", refusal=True)], "completed", None, "refusal"),
        ([message("Partial")], "incomplete", "max_output_tokens", "cut short"),
        ([reasoning("hmm")], "incomplete", "max_output_tokens", "cut short"),
        ([], "incomplete", "content_filter", "cut short"),
        ([{"type": "web_search_call", "id": "ws", "status": "completed"}], "completed", None, "other output"),
        ([{"type": "shell_call", "id": "sh", "call_id": "c"}], "completed", None, "other output"),
        ([], "queued", None, "other output"),  # background: true answers before the model did
        ([], "in_progress", None, "other output"),
        ([], "failed", None, "other output"),
    ],
)
def test_a_reply_is_classified_by_its_items_and_status(output, status, incomplete, expected):
    reply = _reply(response(*output, status=status, incomplete=incomplete))

    seen = {
        "answer": reply.has_text and not reply.tool_calls and not reply.cut_short,
        "tool turn": bool(reply.tool_calls),
        "empty": reply.is_empty,
        "reasoning-only": reply.is_reasoning_only,
        "refusal": reply.refusal is not None and not reply.is_empty,
        "cut short": reply.cut_short and not reply.is_empty and not reply.is_reasoning_only,
        "other output": reply.other_output and not reply.is_empty,
    }
    assert [name for name, hit in seen.items() if hit] == [expected]


def test_an_encrypted_reasoning_item_still_counts_as_reasoning():
    assert _reply(response(reasoning())).reasoning == ENCRYPTED_REASONING


def test_a_commentary_message_without_a_call_is_a_preamble_and_a_final_answer_is_not():
    assert _reply(response(message("I'll check the tests first.", phase="commentary"))).preamble
    assert not _reply(response(message("Done.", phase="final_answer"))).preamble
    assert not _reply(response(message("Done."))).preamble
    assert not _reply(
        response(message("Let me see.", phase="commentary"), message("Done.", phase="final_answer"))
    ).preamble


def test_usage_reads_input_output_and_cached_tokens():
    reply = _reply(response(message("x"), usage=(120, 30), cached=100))

    assert reply.usage == Usage(120, 30, 100)


def test_the_reply_keeps_its_response_as_source():
    body = response(reasoning("r"), message("x"))

    assert _reply(body).source == body


@pytest.mark.parametrize("body", [b"not json", b"[]", b'{"object": "response"}', b'{"choices": []}'])
def test_a_body_that_is_no_response_is_no_reply(body):
    assert parse_reply(body) is None


def test_unknown_fields_and_items_never_break_the_read():
    body = response(message("x"), {"type": "program", "id": "p"}, {"no_type": True}, "not an item")
    body["future_field"] = {"a": 1}

    reply = _reply(body)

    assert reply.content == "x"
    assert reply.other_output
