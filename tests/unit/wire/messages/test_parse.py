"""Reading Anthropic Messages: requests into the neutral conversation, replies into a Reply."""

from __future__ import annotations

import json
from typing import Any

import pytest

from proxy.exchange import ToolCall, Usage
from proxy.wire.messages.format import MESSAGES
from proxy.wire.messages.parse import FAILED_PREFIX, parse_reply, parse_usage, reply_from_message


def message(content: list[dict[str, Any]], stop_reason: str | None = "end_turn", **extra: Any) -> bytes:
    body = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5},
        **extra,
    }
    return json.dumps(body).encode()


THINKING = {"type": "thinking", "thinking": "Let me think.", "signature": "sig"}


def test_a_system_string_becomes_the_first_system_message():
    conversation = MESSAGES.codec.parse_request(
        {"system": "Be brief.", "messages": [{"role": "user", "content": "hi"}]}
    )

    assert [(m.role, m.text) for m in conversation.messages] == [("system", "Be brief."), ("user", "hi")]


def test_system_blocks_are_joined_into_the_system_message():
    payload = {"system": [{"type": "text", "text": "A"}, {"type": "text", "text": "B", "cache_control": {}}]}

    assert MESSAGES.codec.parse_request(payload).messages[0].text == "A\nB"


def test_a_mid_conversation_system_message_keeps_its_role_and_place():
    payload = {
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"},
            {"role": "system", "content": [{"type": "text", "text": "Reminder."}]},
        ]
    }

    assert [(m.role, m.text) for m in MESSAGES.codec.parse_request(payload).messages][-1] == ("system", "Reminder.")


def test_tool_results_become_tool_turns_after_the_rest_of_their_user_turn():
    payload = {
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "42"},
                    {"type": "tool_result", "tool_use_id": "t2", "content": [{"type": "text", "text": "no"}]},
                    {"type": "text", "text": "go on"},
                ],
            }
        ]
    }

    turns = [(m.role, m.text, m.call_id) for m in MESSAGES.codec.parse_request(payload).messages]

    assert turns == [("user", "go on", None), ("tool", "42", "t1"), ("tool", "no", "t2")]


def test_a_user_turn_of_tool_results_only_adds_no_user_turn():
    payload = {
        "messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]}]
    }

    assert [m.role for m in MESSAGES.codec.parse_request(payload).messages] == ["tool"]


def test_a_failed_tool_result_reads_as_an_error():
    block = {"type": "tool_result", "tool_use_id": "t1", "content": "file not found", "is_error": True}

    [result] = MESSAGES.codec.parse_request({"messages": [{"role": "user", "content": [block]}]}).messages

    assert result.text == FAILED_PREFIX + "file not found"


def test_images_and_documents_leave_a_user_turn_in_place():
    content = [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]

    [user] = MESSAGES.codec.parse_request({"messages": [{"role": "user", "content": content}]}).messages

    assert (user.role, user.text) == ("user", "")


def test_an_assistant_turn_carries_its_text_calls_and_thinking():
    content = [
        THINKING,
        {"type": "redacted_thinking", "data": "xyz"},
        {"type": "text", "text": "Reading it."},
        {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"path": "a.txt"}},
        {"type": "server_tool_use", "id": "srv_1", "name": "web_search", "input": {"query": "q"}},
    ]

    [turn] = MESSAGES.codec.parse_request({"messages": [{"role": "assistant", "content": content}]}).messages

    assert turn.text == "Reading it."
    assert turn.reasoning == "Let me think."
    assert [(c.id, c.name, json.loads(c.arguments)) for c in turn.tool_calls] == [
        ("toolu_1", "read", {"path": "a.txt"})
    ]


def test_tools_offer_their_input_schema_as_parameters():
    schema = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
    payload = {
        "tools": [
            {"name": "read", "description": "Read", "input_schema": schema},
            {"type": "bash_20250124", "name": "bash"},
        ]
    }

    conversation = MESSAGES.codec.parse_request(payload)

    assert conversation.tool_parameters() == {"read": schema, "bash": {}}
    assert MESSAGES.codec.declared_schemas(payload) == [("tools[0].input_schema", "read", schema)]


@pytest.mark.parametrize(
    "payload",
    [
        {"output_config": {"effort": "high", "format": {"type": "json_schema", "schema": {"type": "object"}}}},
        {"output_format": {"type": "json_schema", "schema": {"type": "object"}}},
    ],
)
def test_a_json_schema_output_format_is_the_output_contract(payload: dict[str, Any]):
    assert MESSAGES.codec.parse_request(payload).output_schema == {"type": "object"}
    assert MESSAGES.codec.wants_structured_output(payload)


def test_effort_alone_asks_for_no_json():
    payload = {"output_config": {"effort": "high"}}

    assert MESSAGES.codec.parse_request(payload).output_schema is None
    assert not MESSAGES.codec.wants_structured_output(payload)


def test_max_tokens_is_the_output_cap_and_stream_and_model_are_read():
    conversation = MESSAGES.codec.parse_request({"model": "claude-x", "max_tokens": 1024, "stream": True})

    assert (conversation.model, conversation.output_cap, conversation.stream) == (
        "claude-x",
        ("max_tokens", 1024),
        True,
    )


# -- replies ----------------------------------------------------------------------------


def test_a_tool_use_reply_is_a_tool_turn_with_its_input_as_arguments():
    reply = parse_reply(
        message([{"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"path": "a"}}], "tool_use")
    )

    assert reply is not None
    assert [(c.id, c.name, c.parsed_arguments()) for c in reply.tool_calls] == [
        ("toolu_1", "read", ({"path": "a"}, None))
    ]
    assert not reply.is_empty


def test_a_message_read_with_its_calls_and_usage_given_keeps_them_as_given():
    body = json.loads(message([{"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"path": "a"}}]))
    calls = (ToolCall("toolu_1", "read", '{"path": "a", "path": "b"}'),)

    reply = reply_from_message(body, calls=calls, usage=Usage(3, 4))

    assert (reply.tool_calls, reply.usage) == (calls, Usage(3, 4))
    assert reply.source == body["content"]


def test_a_message_read_alone_takes_its_calls_and_usage_from_itself():
    body = json.loads(message([{"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"path": "a"}}]))

    reply = reply_from_message(body)

    assert [(c.name, c.arguments) for c in reply.tool_calls] == [("read", '{"path":"a"}')]
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (10, 5)


def test_an_end_turn_with_no_content_is_empty():
    reply = parse_reply(message([]))

    assert reply is not None
    assert reply.is_empty


def test_an_end_turn_with_only_whitespace_text_is_empty():
    reply = parse_reply(message([{"type": "text", "text": " \n"}]))

    assert reply is not None
    assert reply.is_empty


@pytest.mark.parametrize("thought", [THINKING, {"type": "redacted_thinking", "data": "xyz"}])
def test_thinking_alone_is_reasoning_only(thought: dict[str, Any]):
    reply = parse_reply(message([thought]))

    assert reply is not None
    assert reply.is_reasoning_only


def test_pause_turn_is_never_empty():
    reply = parse_reply(message([], "pause_turn"))

    assert reply is not None
    assert not reply.is_empty
    assert not reply.is_reasoning_only


def test_server_tool_blocks_are_output_not_silence():
    blocks = [
        {"type": "server_tool_use", "id": "srv_1", "name": "web_search", "input": {"query": "q"}},
        {"type": "web_search_tool_result", "tool_use_id": "srv_1", "content": []},
    ]

    reply = parse_reply(message(blocks))

    assert reply is not None
    assert not reply.is_empty
    assert not reply.tool_calls


@pytest.mark.parametrize("stop", ["max_tokens", "refusal", "model_context_window_exceeded"])
def test_a_reply_cut_short_reaches_the_client_as_it_came(stop: str):
    reply = parse_reply(message([], stop))

    assert reply is not None
    assert reply.cut_short
    assert not reply.is_empty


def test_a_refusal_moves_its_text_to_refusal():
    reply = parse_reply(message([{"type": "text", "text": "I can't help with that."}], "refusal"))

    assert reply is not None
    assert (reply.content, reply.refusal) == (None, "I can't help with that.")


def test_the_reply_keeps_its_content_list_as_source():
    blocks = [THINKING, {"type": "text", "text": "Hi"}]

    reply = parse_reply(message(blocks))

    assert reply is not None
    assert reply.source == blocks


@pytest.mark.parametrize("body", [b"not json", b"[]", b'{"type": "error", "error": {}}', b'{"type": "message"}'])
def test_a_body_that_is_no_message_is_no_reply(body: bytes):
    assert parse_reply(body) is None


def test_usage_counts_cache_writes_and_reads_as_prompt_each_apart():
    usage = parse_usage(
        {"input_tokens": 10, "cache_creation_input_tokens": 100, "cache_read_input_tokens": 1000, "output_tokens": 7}
    )

    assert (usage.prompt_tokens, usage.cached_tokens, usage.cache_write_tokens, usage.completion_tokens) == (
        1110,
        1000,
        100,
        7,
    )


@pytest.mark.parametrize(
    ("metadata", "hint"),
    [
        ({"user_id": '{"device_id":"d1","account_uuid":"","session_id":"0fe37a73-3e74"}'}, "0fe37a73-3e74"),
        ({"user_id": "user_abc_account__session_42"}, "user_abc_account__session_42"),
        ({"user_id": "{not json"}, None),
        ({"user_id": '{"device_id":"d1"}'}, None),
        ({"user_id": "end-user-42"}, None),  # an end user's id: all of their runs, never one session
        ({"user_id": "  "}, None),
        ({}, None),
    ],
)
def test_the_session_hint_is_claude_codes_session_id_never_an_end_users_id(metadata: dict[str, Any], hint: str | None):
    assert MESSAGES.codec.session_hint({"metadata": metadata}, lambda name: None) == hint


def test_text_riding_along_with_tool_results_leaves_them_the_latest_results():
    reminder = {"type": "text", "text": "<system-reminder>Be careful.</system-reminder>"}
    result = {"type": "tool_result", "tool_use_id": "t1", "content": "42"}

    conversation = MESSAGES.codec.parse_request({"messages": [{"role": "user", "content": [result, reminder]}]})

    assert [m.call_id for m in conversation.trailing_tool_results()] == ["t1"]
