"""Tool-call arguments, decoded in one place: JSON, each key once, once per call."""

from __future__ import annotations

import dataclasses

import pytest

from proxy.exchange import ToolCall, parse_arguments
from proxy.schemas import compiled
from proxy.wire.chat_parse import parse_conversation


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"city": "Paris", "days": 3}', ({"city": "Paris", "days": 3}, None)),
        ("", ({}, None)),
        ("   ", ({}, None)),
        ('{"q": "caf\\u00e9", "n": 1e3}', ({"q": "café", "n": 1000.0}, None)),  # spelled otherwise than msgspec
        ('{"big": 123456789012345678901234567890}', ({"big": 123456789012345678901234567890}, None)),
        ("[1, 2]", ([1, 2], None)),
        ('{"command": "rm -rf /", "command": "ls"}', (None, "arguments give the key 'command' more than once")),
        ('{"a": [{"b": 1, "c": 2, "b": 1}]}', (None, "arguments give the key 'b' more than once")),
        ('{"a": 1e3, "a": 1000.0}', (None, "arguments give the key 'a' more than once")),
        (
            '{"city": "Par',
            (None, "arguments are not valid JSON: Unterminated string starting at: line 1 column 10 (char 9)"),
        ),
        ("[" * 100_000, (None, "arguments are nested too deeply")),
    ],
)
def test_parse_arguments(text, expected):
    assert parse_arguments(text) == expected


def test_a_number_too_long_to_read_makes_the_arguments_invalid():
    value, problem = parse_arguments('{"n": 1' + "0" * 5000 + "}")  # past Python's 4,300 digits: a ValueError

    assert value is None
    assert problem.startswith("arguments are not valid JSON: ")
    assert "4300 digits" in problem


def test_a_call_decodes_its_arguments_once():
    call = ToolCall("c1", "search", '{"q": "x"}')

    assert call.parsed_arguments() is call.parsed_arguments()


def test_the_decoded_arguments_do_not_change_what_a_call_is():
    assert ToolCall("c1", "search", "{}") == ToolCall("c1", "search", "{}")
    one = ToolCall("c1", "search", "{}")
    one.parsed_arguments()
    assert one == ToolCall("c1", "search", "{}")
    assert hash(one) == hash(ToolCall("c1", "search", "{}"))


def test_a_conversation_with_its_schemas_compiled_keeps_everything_else():
    conversation = parse_conversation(
        {"model": "m", "stream": True, "max_tokens": 9, "messages": [{"role": "user", "content": "hi"}]}
    )
    schema = compiled({"type": "object"})

    compiled_conversation = conversation.with_schemas({"search": schema}, None)

    assert compiled_conversation == dataclasses.replace(conversation, tool_schemas={"search": schema})
