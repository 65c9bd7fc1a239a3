"""Goal mode on /v1/messages: its tool offered in Anthropic's shape and answered inside the proxy."""

from __future__ import annotations

import anthropic
import pytest

from proxy.goal.model import GOAL_TOOL
from tests.support.fake_messages import check_stream, checking_client, message_body, said, text, thinking, tool_use

TOOLS = [{"name": "search", "input_schema": {"type": "object"}}]
TASK = [{"role": "user", "content": "How many people live in Lyon?"}]
GOAL = {"X-Session-Id": "goal-messages", "X-LoopWarden-Goal": "Find the population of Lyon and cite the source."}


def test_the_goal_tool_is_offered_in_anthropics_shape_and_answered_in_the_proxy(messages_proxy, anthropic_upstream):
    completed = {"action": "update_status", "status": "completed", "evidence": "INSEE 2021: 522,250"}
    anthropic_upstream.script(
        said(text("I will look into it.")),
        said(thinking("Report it."), tool_use(GOAL_TOOL, completed, "toolu_goal")),
        said(thinking("Answer."), text("Lyon has 522,250 inhabitants (INSEE, 2021).")),
    )
    client = anthropic.Anthropic(base_url=messages_proxy.url, api_key="sk-ant", max_retries=0)

    raw = client.messages.with_raw_response.create(
        model="c", max_tokens=500, messages=TASK, tools=TOOLS, extra_headers=GOAL
    )

    message = raw.parse()
    assert [b.type for b in message.content] == ["thinking", "text"]
    assert message.content[-1].text == "Lyon has 522,250 inhabitants (INSEE, 2021)."
    assert raw.headers["x-loopwarden-goal"] == "completed"
    offered = anthropic_upstream.requests[0].json()["tools"]
    assert [t["name"] for t in offered] == ["search", GOAL_TOOL]
    assert offered[1]["input_schema"]["type"] == "object"
    answered = anthropic_upstream.requests[2].json()["messages"]
    assert answered[-2]["content"][-1]["name"] == GOAL_TOOL
    assert answered[-1]["content"][0]["tool_use_id"] == "toolu_goal"
    assert "completed" in answered[-1]["content"][0]["content"]
    assert anthropic_upstream.rejected == []


def test_thinking_stays_valid_after_the_goal_ends(messages_proxy, anthropic_upstream):
    completed = {"action": "update_status", "status": "completed", "evidence": "INSEE 2021: 522,250"}
    anthropic_upstream.script(
        said(thinking("Report it."), tool_use(GOAL_TOOL, completed, "toolu_goal")),
        said(thinking("Answer."), text("Lyon has 522,250 inhabitants (INSEE, 2021).")),
        said(thinking("Next."), text("Marseille has about 870,000.")),
    )
    client = anthropic.Anthropic(base_url=messages_proxy.url, api_key="sk-ant", max_retries=0)
    thinking_on = {"type": "enabled", "budget_tokens": 1024}
    first = client.messages.create(
        model="c", max_tokens=2000, messages=TASK, tools=TOOLS, thinking=thinking_on, extra_headers=GOAL
    )
    history = [
        *TASK,
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {"role": "user", "content": "And Marseille?"},
    ]

    second = client.messages.with_raw_response.create(
        model="c", max_tokens=2000, messages=history, tools=TOOLS, thinking=thinking_on, extra_headers=GOAL
    )

    assert second.parse().content[-1].text == "Marseille has about 870,000."
    assert second.headers["x-loopwarden-goal"] == "completed"
    assert anthropic_upstream.rejected == []
    assert [t["name"] for t in anthropic_upstream.requests[-1].json()["tools"]] == ["search", GOAL_TOOL]


def _unanswered(messages: list[dict]) -> list[str]:
    """The tool_use ids not answered by a tool_result at the start of the next user turn."""
    missing = []
    for position, message in enumerate(messages):
        content = message["content"] if isinstance(message["content"], list) else []
        calls = [b["id"] for b in content if message["role"] == "assistant" and b.get("type") == "tool_use"]
        following = messages[position + 1]["content"] if position + 1 < len(messages) else []
        blocks = following if isinstance(following, list) else []
        leading = []
        for block in blocks:
            if block.get("type") != "tool_result":
                break
            leading.append(block["tool_use_id"])
        missing += [each for each in calls if each not in leading]
    return missing


@pytest.mark.parametrize("stream", [False, True])
def test_thinking_stays_valid_after_a_reply_stripped_of_the_goal_tool(messages_proxy, anthropic_upstream, stream):
    refined = {"action": "update_objective", "objective": "Find Lyon's population in the 2021 census."}
    active = {"action": "update_status", "status": "active"}
    completed = {"action": "update_status", "status": "completed", "evidence": "INSEE 2021: 522,250"}
    searching = said(
        thinking("Search."), tool_use(GOAL_TOOL, active, "toolu_goal_2"), tool_use("search", {"q": "Lyon"})
    )
    anthropic_upstream.script(
        said(thinking("Refine it."), tool_use(GOAL_TOOL, refined, "toolu_goal_1")),
        searching,
        said(thinking("Report it."), tool_use(GOAL_TOOL, completed, "toolu_goal_3")),
        said(thinking("Answer."), text("Lyon has 522,250 inhabitants (INSEE, 2021).")),
    )
    streams: list[bytes] = []
    client = checking_client(messages_proxy, streams)
    thinking_on = {"type": "enabled", "budget_tokens": 1024}
    asked = {"model": "c", "max_tokens": 2000, "tools": TOOLS, "thinking": thinking_on, "extra_headers": GOAL}
    if stream:
        with client.messages.stream(messages=TASK, **asked) as streamed:
            first = streamed.get_final_message()
        opened = [e["content_block"]["type"] for e in check_stream(streams[-1]) if e["type"] == "content_block_start"]
        assert opened == ["thinking", "tool_use"]
    else:
        first = client.messages.create(messages=TASK, **asked)
    said_thinking, _, search = message_body(searching, anthropic_upstream.requests[1].json())["content"]
    assert [b.model_dump(exclude_none=True) for b in first.content] == [said_thinking, search]
    history = [
        *TASK,
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "522,250"}]},
    ]

    second = client.messages.create(messages=history, **asked)

    assert second.content[-1].text == "Lyon has 522,250 inhabitants (INSEE, 2021)."
    assert anthropic_upstream.rejected == []
    sent = anthropic_upstream.requests[-1].json()["messages"]
    assert _unanswered(sent) == []
    assert [b["name"] for b in sent[3]["content"] if b["type"] == "tool_use"] == [GOAL_TOOL, "search"]


def test_a_streamed_reply_after_the_goal_ended_in_a_hidden_round_is_stripped_once(messages_proxy, anthropic_upstream):
    completed = {"action": "update_status", "status": "completed", "evidence": "INSEE 2021: 522,250"}
    searching = said(
        thinking("Search."), tool_use(GOAL_TOOL, completed, "toolu_goal_2"), tool_use("search", {"q": "Lyon"})
    )
    anthropic_upstream.script(said(thinking("Report it."), tool_use(GOAL_TOOL, completed, "toolu_goal_1")), searching)
    streams: list[bytes] = []
    client = checking_client(messages_proxy, streams)
    thinking_on = {"type": "enabled", "budget_tokens": 1024}

    with client.messages.stream(
        model="c", max_tokens=2000, messages=TASK, tools=TOOLS, thinking=thinking_on, extra_headers=GOAL
    ) as streamed:
        message = streamed.get_final_message()

    said_thinking, _, search = message_body(searching, anthropic_upstream.requests[1].json())["content"]
    assert [b.model_dump(exclude_none=True) for b in message.content] == [said_thinking, search]
    opened = [e["content_block"]["type"] for e in check_stream(streams[-1]) if e["type"] == "content_block_start"]
    assert opened == ["thinking", "tool_use"]
