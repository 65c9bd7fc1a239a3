"""Goal mode as a participant of the loop: per reply, a decision the loop applies like a verdict."""

from __future__ import annotations

import json

import pytest

from proxy.exchange import Echo, Reply, ReturnCalls, ToolCall, Usage
from proxy.goal.keeper import GoalKeeper, GoalRun, GoalStrip, GoalTurn
from proxy.goal.model import GOAL_TOOL, Goal
from proxy.observe.metrics import Metrics
from proxy.policy.models import Policy
from proxy.request import AgentRequest, RequestNotes
from proxy.session.base import SessionDelta, SessionState
from tests.support.agent_request import agent_request

PAYLOAD = {"model": "m", "messages": [{"role": "user", "content": "Write the report."}]}
POLICY = Policy.model_validate({"goal": {"enabled": True}})
GOAL = Goal("Write the Q3 report.")
GOAL_CALL = ToolCall("g1", GOAL_TOOL, json.dumps({"action": "get_status"}))
THEIR_CALL = ToolCall("c1", "search", "{}")


def request() -> AgentRequest:
    return agent_request(PAYLOAD, POLICY)


def notes() -> RequestNotes:
    return RequestNotes(started=1.0)


def reply(content=None, *calls: ToolCall) -> Reply:
    return Reply(content, None, calls, "tool_calls" if calls else "stop", Usage())


def decide(given: Reply, rounds_left: bool = True):
    keeper = GoalKeeper(Metrics())
    run = GoalRun(GOAL, offered=True, tool_rounds=0 if rounds_left else POLICY.goal.max_tool_rounds)
    decision = keeper.decide(request(), run, given, SessionDelta(), SessionState({}), RequestNotes(started=1.0))
    return run.goal, decision


def test_a_reply_calling_only_the_goal_tool_is_answered_and_continued():
    given = reply(None, GOAL_CALL)

    _, decision = decide(given)

    assert isinstance(decision, GoalTurn)
    assert decision.tool_round
    assert decision.nudge.kind == "goal_tool"
    assert isinstance(decision.nudge.turns[0], ReturnCalls)
    assert set(decision.nudge.turns[0].results) == {"g1"}


@pytest.mark.parametrize(
    ("given", "rounds_left"),
    [
        (reply(None, GOAL_CALL, THEIR_CALL), True),  # the agent's own calls go on to the agent
        (reply(None, GOAL_CALL), False),  # no goal tool round left
    ],
)
def test_the_goal_tool_calls_are_stripped_from_a_reply_that_goes_on(given, rounds_left):
    _, decision = decide(given, rounds_left)

    assert isinstance(decision, GoalStrip)
    assert decision.reply.tool_calls == tuple(c for c in given.tool_calls if c.name != GOAL_TOOL)


def test_a_text_reply_while_the_goal_is_active_is_continued_as_a_goal_turn():
    given = reply("Here is a first draft.")

    goal, decision = decide(given)

    assert isinstance(decision, GoalTurn)
    assert not decision.tool_round
    assert decision.nudge.kind == "goal_continue"
    assert decision.nudge.reason == f"goal turn {goal.turns}"
    assert decision.nudge.turns[0] == Echo(given)


def test_a_reply_calling_only_the_agents_tools_is_left_to_the_guards():
    assert decide(reply(None, THEIR_CALL))[1] is None


def test_a_goal_tool_round_is_counted_on_the_run():
    run = GoalRun(GOAL, offered=True)

    GoalKeeper(Metrics()).decide(request(), run, reply(None, GOAL_CALL), SessionDelta(), SessionState({}), notes())

    assert run.tool_rounds == 1


def test_the_run_keeps_the_reply_it_stripped_whole_with_the_goal_calls_results():
    given = reply(None, GOAL_CALL, THEIR_CALL)
    run = GoalRun(GOAL, offered=True)

    GoalKeeper(Metrics()).decide(request(), run, given, SessionDelta(), SessionState({}), notes())

    assert run.stripped is not None
    assert run.stripped[0] is given
    assert set(run.stripped[1]) == {"g1"}


def test_the_next_decision_forgets_the_reply_stripped_before():
    run = GoalRun(GOAL, offered=True, stripped=(reply(None, GOAL_CALL), {"g1": "Active."}))

    GoalKeeper(Metrics()).decide(request(), run, reply(None, THEIR_CALL), SessionDelta(), SessionState({}), notes())

    assert run.stripped is None


def test_a_request_that_sets_a_goal_opens_a_run_that_offers_the_goal_tool():
    opening = request()
    opening.goal = "Write the Q3 report."

    run = GoalKeeper(Metrics()).open(opening, SessionState({}), SessionDelta(), notes())

    assert run is not None
    assert run.offered
    assert run.goal.objective == "Write the Q3 report."


def test_a_request_without_a_goal_opens_no_run():
    assert GoalKeeper(Metrics()).open(request(), SessionState({}), SessionDelta(), notes()) is None
