"""Endings in the answer channel (issue 22, item 1), in every wire format: when the agent offers an
answer tool, the ending's summary arrives as a call of that tool, rendered by the format."""

from __future__ import annotations

import pytest

from tests.support.assertions import summary_of
from tests.support.formats import Tool
from tests.support.turns import Turn, calling, turn

SUMMARY = "Found: Lyon is in France. Missing: its population. Next step: ask INSEE."
FINAL_ANSWER = Tool(
    "final_answer",
    {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]},
)
REPORT = Tool(
    "report",
    {
        "type": "object",
        "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
        "required": ["city", "population"],
    },
)


def thinking_only(n: int) -> Turn:
    return Turn(reasoning=f"Thinking, round {n}.")


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_free_text_answer_tool_gets_the_summary_as_its_call(wire_format, proxy, fake, stream):
    fake.script(*[thinking_only(n) for n in range(3)], turn(SUMMARY))

    answer = wire_format.ask(proxy, tools=[FINAL_ANSWER], stream=stream)

    assert answer.headers["x-loopwarden-terminated"] == "reasoning_only"
    assert answer.stop == wire_format.calls_stop
    assert [(c.name, {"answer": summary_of(c.arguments["answer"])}) for c in answer.calls] == [
        ("final_answer", {"answer": SUMMARY})
    ]
    assert wire_format.sent(-1).tool_choice == wire_format.none_choice


def test_a_forced_structured_tool_gets_a_forced_valid_call(wire_format, proxy, fake):
    valid = {"city": "Lyon", "population": 0}
    fake.script(*[thinking_only(n) for n in range(3)], calling("report", valid, "end"))

    answer = wire_format.ask(proxy, tools=[REPORT], tool_choice="report")

    assert answer.headers["x-loopwarden-terminated"] == "reasoning_only"
    assert [(c.name, c.arguments) for c in answer.calls] == [("report", valid)]
    assert wire_format.sent(-1).tool_choice == wire_format.forced("report")
