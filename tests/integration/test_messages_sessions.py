"""Sessions on /v1/messages: which session a request joins, and signed thinking that stays valid
when the proxy added turns upstream that the client never replays."""

from __future__ import annotations

import itertools
import json
from typing import Any

import httpx
import pytest

from tests.support.assertions import summary_of
from tests.support.fake_messages import BOUND_ELSEWHERE, checking_client, said, text, thinking, tool_use

TOOLS = [
    {
        "name": "search",
        "input_schema": {
            "type": "object",
            "properties": {"q": {"type": "string"}},
            "required": ["q"],
            "additionalProperties": False,
        },
    }
]
SYSTEM = "You research populations."
TASK = [{"role": "user", "content": "How many people live in Lyon, and what is its rank?"}]
HEADERS = {"x-api-key": "sk-ant", "anthropic-version": "2023-06-01"}
THINKING = {"type": "enabled", "budget_tokens": 1024}


def run_agent(
    proxy, *, session: str, stream: bool = False, turns: int = 6, streams: list[bytes] | None = None
) -> list[dict[str, Any]]:
    """An agent with thinking on: it sends back every turn exactly as it received it (what it
    streams kept in ``streams``, for the checker)."""
    client = checking_client(proxy, [] if streams is None else streams)
    messages: list[dict[str, Any]] = list(TASK)
    results = itertools.count()
    for _ in range(turns):
        arguments = dict(
            model="claude-fake",
            max_tokens=4000,
            system=SYSTEM,
            messages=messages,
            tools=TOOLS,
            thinking=THINKING,
            extra_headers={"X-Session-Id": session},
        )
        if stream:
            with client.messages.stream(**arguments) as streaming:
                message = streaming.get_final_message()
        else:
            message = client.messages.create(**arguments)
        messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in message.content]})
        calls = [b for b in message.content if b.type == "tool_use"]
        if not calls:
            return messages
        messages.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": c.id, "content": f"result {next(results)}"} for c in calls
                ],
            }
        )
    return messages


def client_request_rejected(upstream, messages: list[dict[str, Any]]) -> bool:
    """The client's own history, sent straight to the model API: does it fail the prefix check?"""
    payload = {"model": "claude-fake", "max_tokens": 10, "system": SYSTEM, "tools": TOOLS, "messages": messages}
    reply = httpx.post(upstream.url + "/messages", json=payload, headers=HEADERS)
    return reply.status_code == 400 and BOUND_ELSEWHERE in reply.text


@pytest.mark.parametrize("stream", [False, True])
def test_thinking_stays_valid_after_calls_were_returned_unexecuted(
    make_proxy, anthropic_upstream, write_policies, stream, sdk_streams
):
    proxy = make_proxy(
        upstream=anthropic_upstream.url, policies_dir=str(write_policies(default="streaming: {reasoning: relay}\n"))
    )
    anthropic_upstream.script(
        said(thinking("Search first."), tool_use("search", {"q": "lyon"}, "toolu_1")),
        said(thinking("Now the rank."), tool_use("search", {"query": "rank"}, "toolu_2")),  # invalid: returned
        said(thinking("With q this time."), tool_use("search", {"q": "lyon rank"}, "toolu_3")),
        said(thinking("I have both."), text("Lyon: 522,250 people, third in France.")),
    )

    messages = run_agent(proxy, session=f"thinking-returned-{stream}", stream=stream, streams=sdk_streams)

    assert messages[-1]["content"][-1] == text("Lyon: 522,250 people, third in France.")
    assert anthropic_upstream.rejected == []
    assert len(anthropic_upstream.requests) == 4
    last = anthropic_upstream.requests[-1].json()["messages"]
    assert any(b.get("input") == {"query": "rank"} for m in last for b in m["content"] if isinstance(b, dict))
    assert client_request_rejected(anthropic_upstream, messages[:-1])  # without the splice it would have failed
    assert len(sdk_streams) == (3 if stream else 0)


def test_thinking_stays_valid_after_an_empty_reply_was_nudged(messages_proxy, anthropic_upstream):
    anthropic_upstream.script(
        said(thinking("Search."), tool_use("search", {"q": "lyon"}, "toolu_1")),
        said(),  # empty: nudged with a note the client never sees
        said(thinking("Rank next."), tool_use("search", {"q": "rank"}, "toolu_2")),
        said(thinking("Done."), text("Lyon: 522,250, third.")),
    )

    messages = run_agent(messages_proxy, session="thinking-empty")

    assert messages[-1]["content"][-1] == text("Lyon: 522,250, third.")
    assert anthropic_upstream.rejected == []
    assert client_request_rejected(anthropic_upstream, messages[:-1])


def test_thinking_stays_valid_after_a_tool_result_was_annotated(messages_proxy, anthropic_upstream):
    anthropic_upstream.script(
        *[said(thinking(f"Again {n}."), tool_use("search", {"q": "lyon"}, f"toolu_{n}")) for n in range(4)],
        said(thinking("Something else."), tool_use("search", {"q": "insee lyon"}, "toolu_9")),
        said(thinking("Done."), text("Lyon: 522,250.")),
    )

    messages = run_agent(messages_proxy, session="thinking-annotated", turns=8)

    assert messages[-1]["content"][-1] == text("Lyon: 522,250.")
    assert anthropic_upstream.rejected == []
    upstream_results = [
        b["content"]
        for m in anthropic_upstream.requests[-1].json()["messages"]
        if m["role"] == "user" and isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    ]
    assert any("[LoopWarden]" in str(r) for r in upstream_results)
    assert client_request_rejected(anthropic_upstream, messages[:-1])


def test_metadata_user_id_keeps_a_session_together(messages_proxy, anthropic_upstream):
    def ask(messages: list[dict[str, Any]], **headers: str) -> httpx.Response:
        payload = {"model": "m", "max_tokens": 10, "messages": messages, "metadata": {"user_id": "user_abc_session_42"}}
        return httpx.post(f"{messages_proxy.url}/v1/messages", json=payload, headers={**HEADERS, **headers})

    first = ask(TASK)
    second = ask([{"role": "user", "content": "Another task entirely."}])
    explicit = ask(TASK, **{"X-Session-Id": "mine"})

    assert first.headers["x-loopwarden-session"] == second.headers["x-loopwarden-session"] == "user_abc_session_42"
    assert explicit.headers["x-loopwarden-session"] == "mine"


def test_without_ids_the_session_is_derived_from_system_and_first_user_turn(messages_proxy, anthropic_upstream):
    def ask(system: str) -> str:
        payload = {"model": "m", "max_tokens": 10, "system": system, "messages": TASK}
        reply = httpx.post(f"{messages_proxy.url}/v1/messages", json=payload, headers=HEADERS)
        return reply.headers["x-loopwarden-session"]

    assert ask("A") == ask("A")
    assert ask("A") != ask("B")


def test_the_recorded_turns_are_kept_in_the_session(make_proxy, anthropic_upstream, redis_url):
    proxy = make_proxy(upstream=anthropic_upstream.url, redis_url=redis_url)
    anthropic_upstream.script(
        said(thinking("Search."), tool_use("search", {"q": "lyon"}, "toolu_1")),
        said(),
        said(thinking("Rank."), tool_use("search", {"q": "rank"}, "toolu_2")),
        said(thinking("Done."), text("Lyon: 522,250.")),
    )

    messages = run_agent(proxy, session="thinking-redis")

    assert messages[-1]["content"][-1] == text("Lyon: 522,250.")
    assert anthropic_upstream.rejected == []
    sent = [json.loads(r.body)["messages"] for r in anthropic_upstream.requests]
    assert len(sent[-1]) == len(messages) - 1 + 1  # the hidden note is back in its place


def test_a_budget_ending_summarizes_on_the_transcript_the_upstream_knows(
    make_proxy, anthropic_upstream, write_policies
):
    proxy = make_proxy(upstream=anthropic_upstream.url, policies_dir=str(write_policies(default="max_steps: 5\n")))
    anthropic_upstream.script(
        said(thinking("Search."), tool_use("search", {"q": "lyon"}, "toolu_1")),
        said(),  # nudged: a hidden note
        said(thinking("Rank."), tool_use("search", {"q": "rank"}, "toolu_2")),
        *[said(thinking("More."), tool_use("search", {"q": f"more {n}"}, f"toolu_{n + 3}")) for n in range(4)],
    )
    anthropic_upstream.summary = said(
        thinking("Summing up."), text("Found: 522,250. Missing: the rank source. Next: cite INSEE.")
    )

    messages = run_agent(proxy, session="thinking-budget")

    assert [summary_of(block["text"]) for block in messages[-1]["content"]] == [
        "Found: 522,250. Missing: the rank source. Next: cite INSEE."
    ]
    assert anthropic_upstream.rejected == []
    assert anthropic_upstream.requests[-1].json()["tool_choice"] == {"type": "none"}
