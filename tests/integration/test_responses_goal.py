"""Goal mode on the Responses API: the goal tool is offered upstream as a flat function tool,
handed back answered, and never reaches the agent; plain and streamed (streams validated)."""

from __future__ import annotations

import json

import pytest

from proxy.goal.model import GOAL_TOOL
from tests.support.fake_responses import function_call, message, response, text_response
from tests.support.responses_clients import checked_sdk, create
from tests.support.responses_fixtures import fake, proxy, responses_server  # noqa: F401 (fixtures)

OBJECTIVE = "Find the population of Lyon and cite the source."
TASK = [{"role": "user", "content": "How many people live in Lyon?"}]
TOOLS = [{"type": "function", "name": "search", "parameters": {"type": "object"}}]


def goal(call_id: str = "g1", **arguments):
    return function_call(GOAL_TOOL, json.dumps(arguments), call_id)


def headers(session: str) -> dict[str, str]:
    return {"X-Session-Id": session, "X-LoopWarden-Goal": OBJECTIVE}


STREAMED = pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])


@STREAMED
def test_a_model_that_stops_early_is_continued_until_it_reports_completion(proxy, fake, stream):
    fake.script(
        text_response("I will look into it."),
        response(goal(action="update_status", status="completed", evidence="INSEE 2021: 522,250")),
        text_response("Lyon has 522,250 inhabitants (INSEE, 2021)."),
    )

    with checked_sdk(proxy.base_url) as (client, _):
        got, reply = create(
            client, stream, model="m", input=TASK, tools=TOOLS, store=False, extra_headers=headers(f"g-{stream}")
        )

    assert reply.output_text == "Lyon has 522,250 inhabitants (INSEE, 2021)."
    assert got["x-loopwarden-goal"] == "completed"
    offered = [tool["name"] for tool in fake.agent_payloads[0]["tools"]]
    assert offered == ["search", GOAL_TOOL]
    answered = fake.agent_payloads[2]["input"][-1]
    assert answered["type"] == "function_call_output"
    assert "completed" in answered["output"]
    assert fake.rejections == []


@STREAMED
def test_a_reply_mixing_the_goal_tool_with_a_real_call_reaches_the_agent_as_its_own_call(proxy, fake, stream):
    fake.script(
        response(
            message("Searching."),
            function_call("search", '{"q": "Lyon population"}', "s1"),
            goal("g1", action="update_objective", objective="Lyon population, 2021 census"),
        )
    )

    with checked_sdk(proxy.base_url) as (client, _):
        _, reply = create(
            client, stream, model="m", input=TASK, tools=TOOLS, store=False, extra_headers=headers(f"gm-{stream}")
        )

    calls = [(item.call_id, item.name) for item in reply.output if item.type == "function_call"]
    assert calls == [("s1", "search")]
    assert len(fake.requests) == 1
