"""Real tool loops (the openai SDK running a hand-written agent) against misbehaving models."""

from __future__ import annotations

import itertools
import json

import httpx
import openai

from tests.support.fake_upstream import Json, chat_completion, tool_call

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search",
            "parameters": {
                "type": "object",
                "properties": {"q": {"type": "string"}},
                "required": ["q"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {"name": "fetch", "parameters": {"type": "object", "properties": {"url": {"type": "string"}}}},
    },
]
TASK = [{"role": "system", "content": "You research."}, {"role": "user", "content": "How many people live in Lyon?"}]


def calling(name: str, arguments: dict | str, call_id: str):
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return Json(chat_completion(None, tool_calls=[tool_call(name, raw, call_id)]))


def answer(text: str):
    return Json(chat_completion(text))


def run_agent(client, tool, max_turns=15, session="loop-test"):
    """The agent: call the model, run every tool it asks for, stop at a plain answer."""
    messages = list(TASK)
    turns = 0
    last = None
    while turns < max_turns:
        last = client.chat.completions.with_raw_response.create(
            model="m", messages=messages, tools=TOOLS, extra_headers={"X-Session-Id": session}
        )
        turns += 1
        message = last.parse().choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            return turns, last, messages
        for call in message.tool_calls:
            messages.append({"role": "tool", "tool_call_id": call.id, "content": tool(call)})
    return turns, last, messages


def sdk(proxy):
    return openai.OpenAI(base_url=proxy.base_url, api_key="sk-p", max_retries=0)


def fresh_results():
    counter = itertools.count()
    return lambda call: f"result #{next(counter)} for {call.function.arguments}"


def test_the_model_is_warned_before_the_third_identical_call_reaches_the_agent(proxy, upstream):
    upstream.script(
        calling("search", {"q": "lyon"}, "c1"),
        calling("search", {"q": "lyon"}, "c2"),
        calling("search", {"q": "lyon"}, "c3"),
        calling("fetch", {"url": "https://insee.fr/lyon"}, "c4"),
        answer("Lyon has 522,250 inhabitants (INSEE)."),
    )

    _turns, last, messages = run_agent(sdk(proxy), fresh_results())

    assert last.parse().choices[0].message.content == "Lyon has 522,250 inhabitants (INSEE)."
    seen_calls = [m["tool_calls"][0]["function"]["name"] for m in messages if m.get("tool_calls")]
    assert seen_calls == ["search", "search", "fetch"]  # the third identical search never reached the agent
    warning = upstream.requests[3].json()["messages"][-1]
    assert warning["role"] == "user"
    assert "already called search" in warning["content"]


def test_result_of_a_repeated_call_carries_the_warning_upstream_only(proxy, upstream):
    upstream.script(
        *[calling("search", {"q": "lyon"}, f"c{n}") for n in range(4)],  # the 4th: the model insists after a warning
        answer("Done."),
    )

    _, _, messages = run_agent(sdk(proxy), fresh_results())

    upstream_tool_messages = [m for m in upstream.requests[-1].json()["messages"] if m["role"] == "tool"]
    assert "[LoopWarden]" in upstream_tool_messages[-1]["content"]
    assert all("[LoopWarden]" not in m["content"] for m in messages if m["role"] == "tool")


def test_alternating_two_calls_is_caught_as_a_cycle(proxy, upstream):
    cycle = itertools.cycle([("search", {"q": "lyon"}), ("fetch", {"url": "https://x"})])
    upstream.script(*[calling(*next(cycle), f"c{n}") for n in range(14)], answer("Cycle summary."))

    turns, last, _ = run_agent(sdk(proxy), fresh_results())

    assert last.headers["x-loopwarden-terminated"] == "loop"
    assert turns <= 10


def test_truncated_arguments_are_fixed_before_the_agent_sees_them(proxy, upstream):
    upstream.script(
        calling("search", '{"q": "ly', "c1"),
        calling("search", {"q": "lyon"}, "c2"),
        answer("Lyon: 522,250."),
    )

    _, _last, messages = run_agent(sdk(proxy), fresh_results())

    agent_calls = [m["tool_calls"][0]["function"]["arguments"] for m in messages if m.get("tool_calls")]
    assert agent_calls == ['{"q": "lyon"}']
    retry = upstream.requests[1].json()["messages"]
    assert retry[-1]["role"] == "tool"
    assert "not valid JSON" in retry[-1]["content"]
    assert retry[-2]["tool_calls"][0]["function"]["arguments"] == '{"q": "ly'


def test_a_call_that_stays_invalid_ends_the_session_after_the_retries(proxy, upstream):
    upstream.script(
        *[calling("search", {"query": "lyon"}, f"c{n}") for n in range(3)],
        answer("Found: nothing. Missing: a valid search. Next: search for 'Lyon population'."),
    )

    raw = openai.OpenAI(base_url=proxy.base_url, api_key="sk-p", max_retries=0).chat.completions.with_raw_response
    response = raw.create(model="m", messages=TASK, tools=TOOLS)

    assert response.headers["x-loopwarden-terminated"] == "invalid_tool_args"
    assert response.parse().choices[0].message.tool_calls is None
    assert "Missing" in response.parse().choices[0].message.content


def test_a_call_that_stays_invalid_passes_flagged_when_the_policy_says_pass(make_proxy, upstream, write_policies):
    proxy = make_proxy(policies_dir=write_policies(default="tool_args: {after_max_retries: pass}\n"))
    upstream.script(*[calling("search", {"query": "lyon"}, f"c{n}") for n in range(3)])

    response = httpx.post(
        f"{proxy.base_url}/chat/completions",
        json={"model": "m", "messages": TASK, "tools": TOOLS},
        headers={"Authorization": "Bearer sk-p"},
    )

    assert response.headers["x-loopwarden-flags"] == "tool_args_invalid"
    assert response.headers["x-loopwarden-interventions"] == "tool_args_retry,tool_args_retry"
    assert len(upstream.requests) == 3
    metrics = httpx.get(f"{proxy.metrics_url}/metrics").text
    assert 'loopwarden_flags_total{kind="tool_args_invalid",policy="default",tenant="default"} 1.0' in metrics


def test_a_tool_that_was_not_offered_is_refused(proxy, upstream):
    upstream.script(calling("delete_everything", {}, "c1"), answer("Sorry, answering directly."))

    _, _last, messages = run_agent(sdk(proxy), fresh_results())

    assert not any(m.get("tool_calls") for m in messages)
    assert "does not exist" in upstream.requests[1].json()["messages"][-1]["content"]


def test_the_same_tool_with_new_arguments_each_time_is_never_touched(proxy, upstream):
    upstream.script(*[calling("search", {"q": f"lyon page {n}"}, f"c{n}") for n in range(8)], answer("Found it."))

    turns, last, _ = run_agent(sdk(proxy), fresh_results())

    assert turns == 9
    assert last.parse().choices[0].message.content == "Found it."
    assert len(upstream.requests) == 9
    metrics = httpx.get(f"{proxy.metrics_url}/metrics").text
    assert "loopwarden_interventions_total{" not in metrics


def test_identical_results_end_with_no_progress(proxy, upstream):
    upstream.script(*[calling("search", {"q": f"status {n}"}, f"c{n}") for n in range(10)], answer("Still pending."))

    turns, last, _ = run_agent(sdk(proxy), lambda call: "status: pending")

    assert last.headers["x-loopwarden-terminated"] == "no_progress"
    assert turns <= 5


def test_failing_tools_trip_the_breaker(proxy, upstream):
    upstream.script(
        *[calling("search", {"q": f"try {n}"}, f"c{n}") for n in range(10)], answer("The search tool is down.")
    )

    turns, last, _ = run_agent(sdk(proxy), lambda call: f"Error: upstream search returned 503 ({call.id})")

    assert last.headers["x-loopwarden-terminated"] == "tool_failures"
    assert turns == 4


def test_shadow_mode_reports_the_loop_but_changes_nothing(make_proxy, upstream, write_policies):
    proxy = make_proxy(policies_dir=str(write_policies(default="mode: shadow\n")))
    upstream.script(*[calling("search", {"q": "lyon"}, f"c{n}") for n in range(6)], answer("Done."))

    turns, last, _ = run_agent(sdk(proxy), fresh_results())

    assert turns == 7
    assert "x-loopwarden-terminated" not in last.headers
    metrics = httpx.get(f"{proxy.metrics_url}/metrics").text
    series = 'guard="tool_loop",kind="loop_warning",policy="default",tenant="default"'
    assert f"loopwarden_shadow_decisions_total{{{series}}}" in metrics
    assert 'kind="finalize_loop"' in metrics
