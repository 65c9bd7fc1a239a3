"""Which tool an ending goes to, and in what form (proxy.loop.answer_channel)."""

from __future__ import annotations

import ast
import json
from typing import Any

import pytest

from proxy.exchange import Conversation, Reply, Tool, ToolCall, Usage
from proxy.loop.answer_channel import (
    AnswerTool,
    answer_tool,
    ending_for,
    ending_text,
    final_answer_step,
    free_text_field,
    noticed_call,
)
from proxy.wire.chat.format import CHAT_COMPLETIONS
from proxy.wire.chat.parse import parse_conversation
from tests.support.agent_request import agent_request

ANSWER = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
CITY = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
    "required": ["city", "population"],
}


@pytest.mark.parametrize(
    ("parameters", "field"),
    [
        ({}, "answer"),  # declares none
        ({"type": "object"}, "answer"),
        ({"type": "object", "properties": {}, "additionalProperties": False}, None),  # nothing may be added
        (ANSWER, "answer"),  # smolagents' final_answer
        ({"type": "object", "properties": {"response": {"type": "string"}}}, "response"),
        ({"type": "object", "properties": {"text": {"type": ["string", "null"]}}}, "text"),
        ({"type": "object", "properties": {"n": {"type": "integer"}}}, None),
        ({"type": "object", "properties": {"kind": {"type": "string", "enum": ["a", "b"]}}}, None),
        (CITY, None),  # pydantic-ai's final_result for an output model
        ({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a", "b"]}, None),
        ({"type": "array"}, None),
    ],
)
def test_free_text_field_is_the_one_string_argument(parameters: dict[str, Any], field: str | None):
    assert free_text_field(parameters) == field


def conversation(tools: list[Tool], forced: str | None = None) -> Conversation:
    return Conversation(tools=tools, forced_tool=forced)


@pytest.mark.parametrize(
    ("tools", "forced", "completion_tools", "chosen"),
    [
        ([Tool("search"), Tool("final_answer", ANSWER)], None, (), "final_answer"),
        ([Tool("search"), Tool("final_result", CITY)], None, (), "final_result"),
        ([Tool("final_result_City", CITY)], None, (), "final_result_City"),  # pydantic-ai's union outputs
        # of several answer tools a free-text one: pydantic-ai's output_type=[City, GaveUp]
        ([Tool("final_result_City", CITY), Tool("final_result_GaveUp", ANSWER)], None, (), "final_result_GaveUp"),
        ([Tool("final_result_A", CITY), Tool("final_result_B", CITY)], None, (), "final_result_A"),
        ([Tool("search"), Tool("done", ANSWER)], None, ("done",), "done"),  # the policy's completion_tools
        ([Tool("search"), Tool("report", ANSWER), Tool("final_answer", ANSWER)], "report", (), "report"),
        ([Tool("search")], "missing", (), None),  # forcing a tool it does not offer
        ([Tool("search")], None, ("final_answer",), None),
        ([Tool("final_answer", kind="custom")], None, (), None),  # free-form input: no arguments to fill
    ],
)
def test_answer_tool_is_the_forced_tool_else_a_free_text_completion_tool_else_the_first(
    tools: list[Tool], forced: str | None, completion_tools: tuple[str, ...], chosen: str | None
):
    found = answer_tool(conversation(tools, forced), completion_tools)
    assert (found.name if found else None) == chosen


def test_a_structured_answer_tool_has_no_field():
    found = answer_tool(conversation([Tool("final_result", CITY)]), ())
    assert found is not None
    assert not found.free_text


def test_the_forced_tool_is_read_from_tool_choice():
    payload = {"messages": [], "tool_choice": {"type": "function", "function": {"name": "report"}}}
    assert parse_conversation(payload).forced_tool == "report"
    assert parse_conversation({"messages": [], "tool_choice": "required"}).forced_tool is None


def reply(content: str | None = None, *calls: ToolCall, refusal: str | None = None) -> Reply:
    return Reply(content, None, calls, "stop", Usage(), refusal=refusal)


@pytest.mark.parametrize(
    ("ending", "text"),
    [
        (reply("Found X."), "Found X."),
        (reply(None, refusal="Found X."), "Found X."),
        (reply(None, ToolCall("c", "final_answer", '{"answer": "Found X."}')), "Found X."),
        (
            reply(None, ToolCall("c", "final_result", '{"city": "Lyon", "population": 1}')),
            '{"city": "Lyon", "population": 1}',
        ),
    ],
)
def test_ending_text_reads_the_words_whatever_the_form(ending: Reply, text: str):
    assert ending_text(ending) == text


FINAL_ANSWER = {"type": "function", "function": {"name": "final_answer", "parameters": ANSWER}}
FINAL_RESULT = {"type": "function", "function": {"name": "final_result", "parameters": CITY}}
ENDING = CHAT_COMPLETIONS.codec.ending("Summary.", model="m")


def asking(*tools: dict[str, Any], **fields: Any) -> Any:
    return agent_request(
        {"model": "m", "messages": [{"role": "user", "content": "task"}], "tools": list(tools), **fields}
    )


def message(body: dict[str, Any]) -> dict[str, Any]:
    return body["choices"][0]["message"]


def test_a_free_text_answer_tool_gets_the_summary_in_one_call_with_a_stable_id():
    request = asking(FINAL_ANSWER)

    first = ending_for(request, ENDING, text_started=False)
    again = ending_for(request, ENDING, text_started=False)

    assert first["choices"][0]["finish_reason"] == "tool_calls"
    assert message(first)["content"] is None
    (answer,) = message(first)["tool_calls"]
    assert answer["function"] == {"name": "final_answer", "arguments": '{"answer":"Summary."}'}
    assert message(again)["tool_calls"][0]["id"] == answer["id"]


def test_a_structured_answer_tool_without_a_valid_call_gets_the_refusal():
    body = ending_for(asking(FINAL_RESULT), ENDING, text_started=False)

    assert (message(body)["content"], message(body)["refusal"]) == (None, "Summary.")
    assert "tool_calls" not in message(body)


def test_a_json_mode_request_gets_the_refusal_even_with_an_answer_tool():
    body = ending_for(asking(FINAL_ANSWER, response_format={"type": "json_object"}), ENDING, text_started=False)

    assert (message(body)["content"], message(body)["refusal"]) == (None, "Summary.")


def test_an_ending_already_in_the_requests_channel_is_kept_as_it_is():
    forced = CHAT_COMPLETIONS.codec.render_reply(
        Reply(None, None, (ToolCall("c9", "final_result", '{"city": "Lyon", "population": 1}'),), "tool_calls", Usage())
    )

    assert ending_for(asking(FINAL_RESULT), forced, text_started=False) is forced


def test_a_call_ending_replayed_to_a_request_without_that_tool_is_its_words_as_text():
    forced = CHAT_COMPLETIONS.codec.render_reply(
        Reply(None, None, (ToolCall("c9", "final_result", '{"city": "Lyon", "population": 1}'),), "tool_calls", Usage())
    )

    body = ending_for(asking(), forced, text_started=False)

    assert message(body)["content"] == '{"city": "Lyon", "population": 1}'
    assert "tool_calls" not in message(body)


def test_once_text_streamed_the_ending_stays_text():
    assert ending_for(asking(FINAL_ANSWER), ENDING, text_started=True) == ENDING


def test_a_structured_summary_request_forces_the_answer_tool_and_drops_the_output_constraint():
    payload = {
        "model": "m",
        "messages": [{"role": "user", "content": "task"}],
        "tools": [{"type": "function", "function": {"name": "final_result", "parameters": CITY}}],
        "tool_choice": "required",
        "response_format": {"type": "json_object"},
        "stream": True,
    }

    sent = json.loads(CHAT_COMPLETIONS.codec.render_summary_request(payload, [], "Sum up.", 100, False, "final_result"))

    assert sent["tool_choice"] == {"type": "function", "function": {"name": "final_result"}}
    assert sent["tools"] == payload["tools"]
    assert "response_format" not in sent
    assert "stream" not in sent
    assert sent["messages"][-1] == {"role": "user", "content": "Sum up."}


REPORT = AnswerTool(
    "final_result",
    None,
    {
        "type": "object",
        "properties": {"city": {"type": "string", "enum": ["Oslo"]}, "notes": {"type": "string"}},
        "required": ["city", "notes"],
    },
)


def test_a_structured_answer_takes_the_notice_in_its_free_text_field():
    call = ToolCall("c1", "final_result", '{"city": "Oslo", "notes": "Cheapest on Friday."}')

    noticed = noticed_call(call, REPORT, "LoopWarden stopped this run (loop).", first=True)

    assert noticed is not None
    assert json.loads(noticed.arguments) == {
        "city": "Oslo",
        "notes": "LoopWarden stopped this run (loop).\n\nCheapest on Friday.",
    }


def test_a_structured_answer_without_room_for_words_takes_no_notice():
    call = ToolCall("c1", "final_result", '{"city": "Oslo"}')
    only_enum = AnswerTool("final_result", None, {"type": "object", "properties": {"city": {"enum": ["Oslo"]}}})

    assert noticed_call(call, only_enum, "LoopWarden stopped this run (loop).", first=True) is None


CODE_STEP = {
    "type": "object",
    "properties": {"thought": {"type": "string"}, "code": {"type": "string"}},
    "required": ["thought", "code"],
    "additionalProperties": False,
}
"""smolagents' CodeAgent step under structured outputs (``ThoughtAndCodeAnswer``)."""


def test_a_code_agent_steps_ending_calls_final_answer_with_the_words_as_a_python_string():
    text = 'Found: "Lyon".\nMissing: a\\b — °C.'

    step = json.loads(final_answer_step(CODE_STEP, text) or "")

    assert step["thought"] == text
    assert step["code"].startswith("final_answer(")
    assert ast.literal_eval(step["code"][len("final_answer(") : -1]) == text


@pytest.mark.parametrize(
    "schema",
    [None, CITY, {"type": "object", "properties": {"thought": {"type": "string"}, "code": {"type": "integer"}}}],
    ids=["none", "another-schema", "code-not-text"],
)
def test_any_other_schema_has_no_final_answer_step(schema: dict[str, Any] | None):
    assert final_answer_step(schema, "Summary.") is None


def test_a_json_mode_code_agent_request_gets_the_final_answer_step_as_its_text():
    response_format = {"type": "json_schema", "json_schema": {"name": "ThoughtAndCodeAnswer", "schema": CODE_STEP}}

    body = ending_for(asking(response_format=response_format), ENDING, text_started=False)

    assert (message(body).get("refusal"), json.loads(message(body)["content"])["code"]) == (
        None,
        'final_answer("Summary.")',
    )
