"""Endings in the answer channel on /v1/messages (issue 22, item 1): the same neutral decision,
rendered by the Messages adapter, with the anthropic SDK over real HTTP."""

from __future__ import annotations

import anthropic
import pytest

from tests.support.fake_messages import said, thinking, tool_use
from tests.support.fake_messages import text as text_block

TASK = [{"role": "user", "content": "How many people live in Lyon?"}]
SUMMARY = "Found: Lyon is in France. Missing: its population. Next step: ask INSEE."
FINAL_ANSWER = {
    "name": "final_answer",
    "input_schema": {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]},
}
REPORT = {
    "name": "report",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
        "required": ["city", "population"],
    },
}


def sdk(proxy) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=proxy.url, api_key="sk-ant", max_retries=0)


def thinking_only(n: int):
    return said(thinking(f"Thinking, round {n}."))


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_free_text_answer_tool_gets_the_summary_as_its_tool_use(messages_proxy, anthropic_upstream, stream):
    anthropic_upstream.script(*[thinking_only(n) for n in range(3)], said(text_block(SUMMARY)))
    ask = {"model": "claude-fake", "max_tokens": 1000, "messages": TASK, "tools": [FINAL_ANSWER]}

    if stream:
        with sdk(messages_proxy).messages.stream(**ask) as streaming:
            message = streaming.get_final_message()
    else:
        message = sdk(messages_proxy).messages.create(**ask)

    assert message.stop_reason == "tool_use"
    assert [(b.name, b.input) for b in message.content if b.type == "tool_use"] == [
        ("final_answer", {"answer": SUMMARY})
    ]
    assert anthropic_upstream.requests[-1].json()["tool_choice"] == {"type": "none"}


def test_a_forced_structured_tool_gets_a_forced_valid_tool_use(messages_proxy, anthropic_upstream):
    valid = {"city": "Lyon", "population": 0}
    anthropic_upstream.script(*[thinking_only(n) for n in range(3)], said(tool_use("report", valid, "toolu_end")))
    forced = {"type": "tool", "name": "report"}

    raw = sdk(messages_proxy).messages.with_raw_response.create(
        model="claude-fake", max_tokens=1000, messages=TASK, tools=[REPORT], tool_choice=forced
    )

    message = raw.parse()
    assert raw.headers["x-loopwarden-terminated"] == "reasoning_only"
    assert [(b.name, b.input) for b in message.content if b.type == "tool_use"] == [("report", valid)]
    assert anthropic_upstream.requests[-1].json()["tool_choice"] == forced
