"""The guards on /v1/messages, end to end with the anthropic SDK against misbehaving models."""

from __future__ import annotations

import itertools
import json
from typing import Any

import anthropic
import httpx
import pytest

from tests.support.fake_messages import check_stream, judge_verdict, said, streamed_message, text, thinking, tool_use

TOOLS = [
    {
        "name": "search",
        "description": "Search the web",
        "input_schema": {
            "type": "object",
            "properties": {"q": {"type": "string"}},
            "required": ["q"],
            "additionalProperties": False,
        },
    },
    {"name": "fetch", "input_schema": {"type": "object", "properties": {"url": {"type": "string"}}}},
]
TASK = [{"role": "user", "content": "How many people live in Lyon?"}]
HEADERS = {"x-api-key": "sk-ant", "anthropic-version": "2023-06-01"}


def sdk(proxy) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=proxy.url, api_key="sk-ant", max_retries=0)


def calling(name: str, arguments: dict[str, Any], call_id: str, *before: dict[str, Any]):
    return said(*before, tool_use(name, arguments, call_id))


def fresh_results():
    counter = itertools.count()
    return lambda call: f"result #{next(counter)} for {json.dumps(call.input)}"


def run_agent(client: anthropic.Anthropic, tool, *, session: str = "messages-loop", max_turns: int = 15):
    """The agent: call the model, run every tool it asks for, stop at an answer."""
    messages: list[dict[str, Any]] = list(TASK)
    turns = 0
    raw = None
    while turns < max_turns:
        raw = client.messages.with_raw_response.create(
            model="claude-fake",
            max_tokens=1000,
            messages=messages,
            tools=TOOLS,
            extra_headers={"X-Session-Id": session},
        )
        turns += 1
        message = raw.parse()
        messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in message.content]})
        calls = [b for b in message.content if b.type == "tool_use"]
        if not calls:
            return turns, raw, messages
        messages.append(
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": c.id, "content": tool(c)} for c in calls],
            }
        )
    return turns, raw, messages


def post(proxy, payload: dict[str, Any], **headers: str) -> httpx.Response:
    return httpx.post(f"{proxy.url}/v1/messages", json=payload, headers={**HEADERS, **headers}, timeout=30)


def base(**extra: Any) -> dict[str, Any]:
    return {"model": "claude-fake", "max_tokens": 1000, "messages": TASK, **extra}


@pytest.mark.parametrize("stream", [False, True])
def test_an_empty_reply_is_nudged_once_then_the_good_one_arrives(messages_proxy, anthropic_upstream, stream: bool):
    anthropic_upstream.script(said(), said(text("Lyon has 522,250 inhabitants.")))

    reply = post(messages_proxy, base(stream=stream))

    message = streamed_message(check_stream(reply.content)) if stream else reply.json()
    assert [b["text"] for b in message["content"]] == ["Lyon has 522,250 inhabitants."]
    assert reply.headers["x-loopwarden-interventions"] == "empty_nudge"
    nudged = anthropic_upstream.requests[1].json()["messages"]
    assert nudged[:-1] == TASK
    assert nudged[-1]["role"] == "user"


@pytest.mark.parametrize("stream", [False, True])
def test_thinking_and_nothing_else_is_ended_gracefully(messages_proxy, anthropic_upstream, stream: bool):
    anthropic_upstream.script(
        *[said(thinking(f"Thinking, round {n}.")) for n in range(3)],
        said(text("Found: nothing yet. Missing: the figure. Next: search INSEE.")),
    )

    reply = post(messages_proxy, base(stream=stream))

    assert reply.headers["x-loopwarden-terminated"] == "reasoning_only"
    message = streamed_message(check_stream(reply.content)) if stream else reply.json()
    assert message["id"].startswith("msg_lw")
    assert "Missing: the figure" in "".join(b.get("text", "") for b in message["content"])


def test_pause_turn_reaches_the_client_untouched(messages_proxy, anthropic_upstream):
    server_call = {"type": "server_tool_use", "id": "srv_1", "name": "web_search", "input": {"query": "lyon"}}
    anthropic_upstream.script(said(server_call, stop_reason="pause_turn"))

    reply = post(messages_proxy, base())

    assert reply.json()["stop_reason"] == "pause_turn"
    assert reply.headers["x-loopwarden-interventions"] == "none"
    assert len(anthropic_upstream.requests) == 1


@pytest.mark.parametrize("stop", ["max_tokens", "refusal", "model_context_window_exceeded"])
def test_a_reply_cut_short_reaches_the_client_as_it_came(messages_proxy, anthropic_upstream, stop: str):
    anthropic_upstream.script(said(stop_reason=stop))

    reply = post(messages_proxy, base())

    assert reply.json()["stop_reason"] == stop
    assert len(anthropic_upstream.requests) == 1


def test_the_same_call_forever_ends_gracefully_within_block_at(messages_proxy, anthropic_upstream):
    anthropic_upstream.script(
        *[calling("search", {"q": "lyon"}, f"toolu_{n}") for n in range(7)],
        said(text("Lyon: ~520k. Missing: a source.")),
    )

    turns, last, _ = run_agent(sdk(messages_proxy), fresh_results())

    assert last.headers["x-loopwarden-terminated"] == "loop"
    assert turns <= 5
    assert last.parse().content[0].text == "Lyon: ~520k. Missing: a source."


def test_bad_tool_input_goes_back_to_the_model_path_by_path(messages_proxy, anthropic_upstream):
    anthropic_upstream.script(
        calling("search", {"query": "lyon"}, "toolu_1"),
        calling("search", {"q": "lyon"}, "toolu_2"),
        said(text("Lyon: 522,250.")),
    )

    _, _, messages = run_agent(sdk(messages_proxy), fresh_results())

    agent_calls = [
        b["input"] for m in messages if m["role"] == "assistant" for b in m["content"] if b["type"] == "tool_use"
    ]
    assert agent_calls == [{"q": "lyon"}]
    retry = anthropic_upstream.requests[1].json()["messages"]
    assert retry[-2] == {"role": "assistant", "content": [tool_use("search", {"query": "lyon"}, "toolu_1")]}
    [result] = retry[-1]["content"][:1]
    assert (result["type"], result["tool_use_id"]) == ("tool_result", "toolu_1")
    assert "$.q: 'q' is a required property" in result["content"]
    assert "Additional properties are not allowed ('query' was unexpected)" in result["content"]


def test_a_premature_done_is_judged_and_continued(messages_proxy, anthropic_upstream):
    anthropic_upstream.judge = lambda request: judge_verdict(request, False, "the rank was not given")
    full = "Lyon has 522,250 inhabitants (INSEE 2021), the third city of France after Paris and Marseille. " * 3
    anthropic_upstream.script(said(text("Done.")), said(text(full)))
    history = [
        *TASK,
        {"role": "assistant", "content": [tool_use("search", {"q": "lyon"}, "toolu_1")]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "522,250; rank 3"}]},
    ]

    reply = post(messages_proxy, base(messages=history, tools=TOOLS))

    assert reply.json()["content"][0]["text"] == full
    assert reply.headers["x-loopwarden-interventions"] == "judge_continue"
    judged = anthropic_upstream.judge_requests[0].json()
    assert judged["system"].startswith("You are a strict completion judge")
    continued = anthropic_upstream.requests[1].json()["messages"]
    assert continued[-2] == {"role": "assistant", "content": [text("Done.")]}
    assert "the rank was not given" in continued[-1]["content"][0]["text"]


def test_a_step_budget_ends_the_session_with_a_summary(make_proxy, anthropic_upstream, write_policies):
    proxy = make_proxy(upstream=anthropic_upstream.url, policies_dir=str(write_policies(default="max_steps: 2\n")))
    anthropic_upstream.script(*[calling("search", {"q": f"lyon {n}"}, f"toolu_{n}") for n in range(3)])
    anthropic_upstream.summary = said(text("Found: one page. Missing: the figure. Next: fetch INSEE."))

    turns, last, _ = run_agent(sdk(proxy), fresh_results(), session="messages-budget")

    assert last.headers["x-loopwarden-terminated"] == "budget_steps"
    assert turns == 2  # one agent call, then the call that would use the last step is the ending
    assert last.parse().content[0].text == "Found: one page. Missing: the figure. Next: fetch INSEE."
    summary_call = anthropic_upstream.requests[-1].json()
    assert summary_call["tool_choice"] == {"type": "none"}
    assert last.parse().id.startswith("msg_lw")


DENY = r"""
permissions:
  rules:
    - id: no-root-rm
      tool: run_shell
      when: [{path: $.command, regex: 'rm\s+-rf\s+/(\s|$)'}]
      action: deny
      message: Deleting the filesystem root is never allowed.
"""


@pytest.mark.parametrize("stream", [False, True])
def test_a_denied_call_never_reaches_the_agent(make_proxy, anthropic_upstream, write_policies, stream: bool):
    proxy = make_proxy(upstream=anthropic_upstream.url, policies_dir=str(write_policies(default=DENY)))
    shell = [
        {"name": "run_shell", "input_schema": {"type": "object"}},
        {"name": "list_files", "input_schema": {"type": "object"}},
    ]
    anthropic_upstream.script(
        said(thinking("Clean it all."), tool_use("run_shell", {"command": "rm -rf /"}, "toolu_1")),
        said(thinking("Safer."), tool_use("list_files", {"dir": "build"}, "toolu_2")),
    )

    reply = post(proxy, base(tools=shell, stream=stream))

    message = streamed_message(check_stream(reply.content)) if stream else reply.json()
    assert [b["name"] for b in message["content"] if b["type"] == "tool_use"] == ["list_files"]
    assert reply.headers["x-loopwarden-interventions"] == "permission_denied"
    refused = anthropic_upstream.requests[1].json()["messages"]
    assert refused[-2]["content"][1]["name"] == "run_shell"
    assert refused[-1]["content"][0]["tool_use_id"] == "toolu_1"
    assert "never allowed" in refused[-1]["content"][0]["content"]
    assert anthropic_upstream.rejected == []  # the echoed thinking kept its signature


def test_a_streamed_nudge_after_released_thinking_continues_one_message(make_proxy, anthropic_upstream, write_policies):
    proxy = make_proxy(
        upstream=anthropic_upstream.url,
        policies_dir=str(write_policies(default="streaming: {reasoning: relay}\n")),
    )
    anthropic_upstream.script(
        said(thinking("Let me search."), tool_use("search", {"query": "lyon"}, "toolu_1")),
        said(thinking("Fixing the input."), tool_use("search", {"q": "lyon"}, "toolu_2")),
    )

    reply = post(proxy, base(tools=TOOLS, stream=True))

    message = streamed_message(check_stream(reply.content))
    assert [b["type"] for b in message["content"]] == ["thinking", "thinking", "tool_use"]
    assert message["content"][2]["input"] == {"q": "lyon"}
    assert message["stop_reason"] == "tool_use"
