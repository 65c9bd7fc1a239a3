"""Tool-call arguments, decoded in one place: JSON, each key once, once per call."""

from __future__ import annotations

import dataclasses

import pytest

from proxy.exchange import Conversation, Message, ToolCall, parse_arguments
from proxy.loop.finalize import local_summary
from proxy.schemas.compiled import compiled
from proxy.wire.chat.parse import parse_conversation


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


_TASK = Message("user", "New task:\nHow many people live in Lyon?")
_CALLED = Message("assistant", "Calling tools:\n[{'name': 'search'}]")


@pytest.mark.parametrize(
    ("messages", "trailing", "all_results"),
    [
        ((_TASK,), 0, 0),
        ((Message("user", "Observation: a human starting with it"),), 0, 0),  # the task itself is never one
        ((_TASK, _CALLED, Message("user", "Observation:\nLyon: 522,250")), 1, 1),
        ((_TASK, _CALLED, Message("user", "Call id: c1\nError:\nsearch failed")), 1, 1),
        ((_TASK, _CALLED, Message("user", "Error:\nI pasted this from my terminal")), 0, 0),  # a person's words
        ((_TASK, _CALLED, Message("user", "Observation:\nA"), _CALLED, Message("user", "  Observation:\nB")), 1, 2),
        ((_TASK, _CALLED, Message("user", "Observation:\nA"), _CALLED, Message("user", "Thanks, go on.")), 0, 1),
        ((_TASK, _CALLED, Message("tool", "A", call_id="c1"), Message("tool", "B", call_id="c2")), 2, 2),
    ],
)
def test_observation_turns_are_tool_results(messages, trailing, all_results):
    conversation = Conversation(messages)

    assert len(conversation.trailing_tool_results()) == trailing
    assert len(conversation.tool_results()) == all_results
    assert conversation.used_tools == (all_results > 0)


def test_the_local_summary_quotes_observation_turns():
    conversation = Conversation((_TASK, _CALLED, Message("user", "Observation:\nLyon: 522,250 inhabitants")))

    assert "Lyon: 522,250 inhabitants" in local_summary(conversation, "the step budget ran out")


@pytest.mark.parametrize(
    ("messages", "trailing"),
    [
        ((_TASK, _CALLED, Message("tool", "A", call_id="c1"), Message("system", "Reminder: be brief.")), 1),
        ((_TASK, _CALLED, Message("tool", "A", call_id="c1"), Message("developer", "Mind the budget.")), 1),
        ((_TASK, _CALLED, Message("tool", "A", call_id="c1"), Message("system", "x"), Message("tool", "B")), 2),
        ((Message("system", "You are an agent."), _TASK), 0),
    ],
    ids=["system-after", "developer-after", "system-between", "opening-system"],
)
def test_a_system_turn_among_the_latest_tool_results_does_not_hide_them(messages, trailing):
    assert len(Conversation(messages).trailing_tool_results()) == trailing


def test_the_quickly_built_types_are_still_frozen_dataclasses_with_their_defaults():
    from proxy.exchange import Tool

    message = Message("user", "hi")
    with pytest.raises(dataclasses.FrozenInstanceError):
        message.text = "changed"  # type: ignore[misc]
    assert message == Message("user", "hi", (), None, "") == dataclasses.replace(message)
    assert (Tool("a").parameters, Tool("a").kind, Tool("a", {"type": "object"}).parameters) == (
        {},
        "function",
        {"type": "object"},
    )
    assert Tool("a").parameters is not Tool("b").parameters  # a fresh default each
    assert Conversation()._results is None
    assert Conversation().messages == ()
    with pytest.raises(TypeError):
        Message()  # type: ignore[call-arg]
