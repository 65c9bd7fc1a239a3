"""Reading chat completions: what a request asks for and what a reply says, as tables (the format: test_format.py)."""

from __future__ import annotations

import json

import pytest

from proxy.exchange import Tool, ToolCall
from proxy.wire.chat.parse import (
    content_text,
    declared_schemas,
    forced_tool,
    offered_tools,
    output_cap,
    parse_reply,
    requested_schema,
    tool_call,
    wants_structured_output,
)


def test_a_json_schema_or_json_object_request_wants_structured_output():
    assert wants_structured_output({"response_format": {"type": "json_schema", "json_schema": {}}})
    assert wants_structured_output({"response_format": {"type": "json_object"}})
    assert not wants_structured_output({"response_format": {"type": "text"}})
    assert not wants_structured_output({"response_format": "json"})
    assert not wants_structured_output({})


def test_a_refusal_in_a_reply_is_read_and_is_no_empty_reply():
    body = {"choices": [{"message": {"role": "assistant", "content": None, "refusal": "No."}}]}

    reply = parse_reply(json.dumps(body).encode())

    assert reply is not None
    assert (reply.refusal, reply.is_empty, reply.is_reasoning_only) == ("No.", False, False)


FORCED = [
    pytest.param({}, None, id="the-model-chooses"),
    pytest.param({"tool_choice": "required"}, None, id="any-tool-is-no-one-tool"),
    pytest.param({"tool_choice": {"type": "function", "function": {"name": "answer"}}}, "answer", id="a-function"),
    pytest.param({"tool_choice": {"type": "function", "function": {"name": ""}}}, None, id="a-blank-name"),
    pytest.param({"function_call": {"name": "answer"}}, "answer", id="the-legacy-form"),
    pytest.param({"function_call": "auto"}, None, id="the-legacy-auto"),
]


@pytest.mark.parametrize(("payload", "name"), FORCED)
def test_the_forced_tool_is_the_one_tool_choice_names(payload, name):
    assert forced_tool(payload) == name


CAPS = [
    pytest.param({}, None, id="none"),
    pytest.param({"max_tokens": 100}, ("max_tokens", 100), id="max-tokens"),
    pytest.param({"max_tokens": 100, "max_completion_tokens": 50}, ("max_completion_tokens", 50), id="the-newer-wins"),
    pytest.param({"max_completion_tokens": 0, "max_tokens": 7}, ("max_tokens", 7), id="zero-is-no-cap"),
    pytest.param({"max_tokens": True}, None, id="a-boolean-is-no-cap"),
    pytest.param({"max_tokens": "100"}, None, id="a-string-is-no-cap"),
]


@pytest.mark.parametrize(("payload", "cap"), CAPS)
def test_the_output_cap_is_the_first_positive_limit_as_upstream_reads_it(payload, cap):
    assert output_cap(payload) == cap


def test_offered_tools_are_functions_custom_tools_and_legacy_functions_in_order():
    payload = {
        "tools": [
            {
                "type": "function",
                "function": {"name": "search", "description": "Find.", "parameters": {"type": "object"}},
            },
            {"type": "custom", "custom": {"name": "patch", "description": "Apply."}},
            {"type": "function", "function": {"parameters": {}}},
            "not a tool",
        ],
        "functions": [{"name": "legacy", "parameters": "not a schema"}],
    }

    assert offered_tools(payload) == [
        Tool("search", {"type": "object"}, "function", "Find."),
        Tool("patch", {}, "custom", "Apply."),
        Tool("legacy", {}, "function", ""),
    ]


CALLS = [
    pytest.param(
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}},
        ToolCall("c1", "f", '{"a": 1}'),
        id="a-function-call",
    ),
    pytest.param(
        {"id": "c2", "type": "custom", "custom": {"name": "patch", "input": "diff"}},
        ToolCall("c2", "patch", "diff", "custom"),
        id="a-custom-call",
    ),
    pytest.param({"id": 3, "function": {"name": "f", "arguments": {"a": 1}}}, ToolCall("3", "f", ""), id="odd-fields"),
    pytest.param({"id": "c4"}, ToolCall("c4", "", ""), id="no-function"),
    pytest.param("c5", None, id="not-an-object"),
]


@pytest.mark.parametrize(("raw", "call"), CALLS)
def test_a_tool_call_is_read_whatever_shape_it_arrives_in(raw, call):
    assert tool_call(raw) == call


@pytest.mark.parametrize(
    ("content", "text"),
    [
        ("plain", "plain"),
        ([{"type": "text", "text": "a"}, {"type": "image_url"}, {"type": "text", "text": "b"}], "a\nb"),
        (None, ""),
        (42, ""),
    ],
    ids=["a-string", "parts", "none", "not-text"],
)
def test_a_messages_text_is_its_string_or_its_text_parts_joined(content, text):
    assert content_text(content) == text


def test_declared_schemas_name_where_each_sits_and_skip_empty_ones():
    payload = {
        "tools": [
            {"type": "function", "function": {"name": "a", "parameters": {"type": "object"}}},
            {"type": "function", "function": {"name": "b", "parameters": {}}},
            {"type": "custom", "custom": {"name": "c"}},
            {"type": "function", "function": {"name": "d", "parameters": {"type": "string"}}},
        ],
        "functions": [{"name": "e", "parameters": {"type": "array"}}],
    }

    assert declared_schemas(payload) == [
        ("tools[0].function.parameters", "a", {"type": "object"}),
        ("tools[3].function.parameters", "d", {"type": "string"}),
        ("functions[0].parameters", "e", {"type": "array"}),
    ]


@pytest.mark.parametrize(
    ("response_format", "schema"),
    [
        ({"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "object"}}}, {"type": "object"}),
        ({"type": "json_schema", "json_schema": {"name": "a"}}, None),
        ({"type": "json_object"}, None),
        ("json", None),
    ],
    ids=["a-schema", "a-schema-spec-without-schema", "json-object", "not-an-object"],
)
def test_the_requested_schema_is_the_json_schema_response_formats(response_format, schema):
    assert requested_schema({"response_format": response_format}) == schema
