"""The neutral exchange: a call decodes its arguments once; conversations read their history once."""

from __future__ import annotations

import dataclasses

import pytest

from proxy.exchange import Conversation, Message, ToolCall
from proxy.loop.finalize import local_summary
from proxy.schemas.compiled import compiled
from proxy.wire.chat.parse import parse_conversation


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


def test_a_conversation_addressed_by_its_path_keeps_everything_else():
    conversation = parse_conversation({"max_tokens": 9, "messages": [{"role": "user", "content": "hi"}]})

    addressed = conversation.addressed("gemini-2.5-flash", True)

    assert addressed == dataclasses.replace(conversation, model="gemini-2.5-flash", stream=True)


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
