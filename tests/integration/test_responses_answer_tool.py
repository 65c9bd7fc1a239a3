"""Endings in the answer channel on the Responses API (issue 22, item 1): the same neutral
decision, rendered by the Responses adapter, with the real openai SDK over real HTTP."""

from __future__ import annotations

import json

import pytest

from tests.support.fake_responses import function_call, reasoning, response, text_response
from tests.support.responses_clients import checked_sdk, create
from tests.support.responses_fixtures import fake, responses_server  # noqa: F401 (fixtures)

TASK = [{"role": "user", "content": "How many people live in Lyon?"}]
SUMMARY = "Found: Lyon is in France. Missing: its population. Next step: ask INSEE."
FINAL_ANSWER = {
    "type": "function",
    "name": "final_answer",
    "parameters": {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]},
}
REPORT = {
    "type": "function",
    "name": "report",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
        "required": ["city", "population"],
    },
}
STREAMED = pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])


@pytest.fixture
def sdk(make_proxy, fake):
    with checked_sdk(make_proxy(upstream=fake.url).base_url) as (client, tee):
        yield client, tee


def thinking_only():
    return response(reasoning("Still thinking..."))


@STREAMED
def test_a_free_text_answer_tool_gets_the_summary_as_its_call(sdk, fake, stream):
    client, _ = sdk
    fake.script(*[thinking_only() for _ in range(3)], text_response(SUMMARY))

    headers, reply = create(client, stream, model="m", input=TASK, store=False, tools=[FINAL_ANSWER])

    assert headers["x-loopwarden-terminated"] == "reasoning_only"
    calls = [item for item in reply.output if item.type == "function_call"]
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("final_answer", {"answer": SUMMARY})]
    assert fake.agent_payloads[-1]["tool_choice"] == "none"


def test_a_forced_structured_tool_gets_a_forced_valid_call(sdk, fake):
    client, _ = sdk
    valid = json.dumps({"city": "Lyon", "population": 0})
    fake.script(*[thinking_only() for _ in range(3)], response(function_call("report", valid, "end")))
    forced = {"type": "function", "name": "report"}

    headers, reply = create(client, False, model="m", input=TASK, store=False, tools=[REPORT], tool_choice=forced)

    assert headers["x-loopwarden-terminated"] == "reasoning_only"
    (call,) = [item for item in reply.output if item.type == "function_call"]
    assert (call.name, json.loads(call.arguments)) == ("report", {"city": "Lyon", "population": 0})
    assert fake.agent_payloads[-1]["tool_choice"] == forced
