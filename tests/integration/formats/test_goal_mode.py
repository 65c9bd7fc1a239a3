"""Goal mode in every wire format: the goal tool is offered upstream next to the agent's tools,
answered inside the proxy, and never reaches the agent; plain and streamed."""

from __future__ import annotations

import pytest

from proxy.goal.model import GOAL_TOOL
from tests.support.formats import Tool
from tests.support.turns import Call, Turn, turn

OBJECTIVE = "Find the population of Lyon and cite the source."
TOOLS = [Tool("search")]
STREAMED = pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])


def goal(session: str) -> dict[str, str]:
    return {"X-Session-Id": session, "X-LoopWarden-Goal": OBJECTIVE}


def reporting(*calls: Call) -> Turn:
    return Turn(None, calls)


@STREAMED
def test_a_model_that_stops_early_is_continued_until_it_reports_completion(wire_format, proxy, fake, stream):
    completed = {"action": "update_status", "status": "completed", "evidence": "INSEE 2021: 522,250"}
    fake.script(
        turn("I will look into it."),
        reporting(Call(GOAL_TOOL, completed, "g1")),
        turn("Lyon has 522,250 inhabitants (INSEE, 2021)."),
    )

    answer = wire_format.ask(proxy, tools=TOOLS, stream=stream, headers=goal(f"goal-done-{stream}"))

    assert answer.text == "Lyon has 522,250 inhabitants (INSEE, 2021)."
    assert answer.calls == []
    assert answer.headers["x-loopwarden-goal"] == "completed"
    assert len(fake.requests) == 3
    assert wire_format.sent(0).tools == ["search", GOAL_TOOL]
    continued = wire_format.sent(1).last
    assert "<goal_objective>\nFind the population of Lyon and cite the source.\n</goal_objective>" in continued
    assert "Turns used: 1/10" in continued
    [(call_id, result)] = wire_format.sent(2).results
    assert call_id == "g1"
    assert "completed" in result
    assert wire_format.rejected() == []


@STREAMED
def test_a_reply_mixing_the_goal_tool_with_a_real_call_reaches_the_agent_as_its_own_call(
    wire_format, proxy, fake, stream
):
    refined = {"action": "update_objective", "objective": "Lyon population, 2021 census"}
    fake.script(reporting(Call("search", {"q": "Lyon population"}, "s1"), Call(GOAL_TOOL, refined, "g1")))

    answer = wire_format.ask(proxy, tools=TOOLS, stream=stream, headers=goal(f"goal-mixed-{stream}"))

    assert [(c.id, c.name) for c in answer.calls] == [("s1", "search")]
    assert answer.stop == wire_format.calls_stop
    session = wire_format.session(proxy, f"goal-mixed-{stream}").json()
    assert session["goal"]["objective"] == "Lyon population, 2021 census"
    assert len(fake.requests) == 1
