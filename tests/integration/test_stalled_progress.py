"""Ever-new arguments, the same result (issue 22, item 5), over real HTTP with real clients.

A model that searches again and again with new queries that all come back empty is asked
about (the judge: do these steps make progress?), nudged, and ended with ``no_progress``
before any client's own turn cap; without the judge it is nudged only; and a run of real
lookups (different results) is never disturbed.
"""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import openai

from tests.support.assertions import summary_of
from tests.support.fake_upstream import Json, chat_completion, is_progress_question, tool_call, verdict

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
        },
    }
]
TASK = "How many people lived in Lyon in 1800?"
SUMMARY = "Found: no source for 1800. Missing: the figure. Next step: ask the city archives."
CLIENT_CAP = 10
"""The OpenAI Agents SDK's default turn cap (LangGraph's default recursion limit allows 12 tool steps)."""


def searching(n: int) -> Json:
    return Json(chat_completion(None, tool_calls=[tool_call("search", json.dumps({"q": f"lyon 1800 {n}"}), f"c{n}")]))


def run_agent(proxy, tool, session: str) -> tuple[list[Any], list[dict[str, Any]]]:
    """The openai SDK loop: call the model, run its tool, stop at a plain answer or the client's cap."""
    client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-p", max_retries=0)
    messages: list[dict[str, Any]] = [{"role": "user", "content": TASK}]
    responses = []
    for _ in range(CLIENT_CAP):
        raw = client.chat.completions.with_raw_response.create(
            model="m", messages=messages, tools=TOOLS, extra_headers={"X-Session-Id": session}
        )
        responses.append(raw)
        message = raw.parse().choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            break
        for call in message.tool_calls:
            messages.append(
                {"role": "tool", "tool_call_id": call.id, "content": tool(json.loads(call.function.arguments))}
            )
    return responses, messages


def nothing_found(arguments: dict[str, Any]) -> str:
    return f"No results for '{arguments['q']}'."


def no_progress_judge(request: dict[str, Any]) -> Json:
    """Finds every run of steps stalled (and every final answer done)."""
    if is_progress_question(request):
        return verdict(request, False, "every query came back empty")
    return verdict(request, True)


STALLED_RUN = 6
"""Searches the model makes before its session ends: 3 results (judged: a nudge, its calls
handed back, one more search), then at its next search (judged again: the end), on the
client's 5th request: within the lowest turn caps clients set (Agents SDK max_turns 5)."""


def sample(metrics: str, name: str, **labels: str) -> float:
    for line in metrics.splitlines():
        if line.startswith(name + "{") and dict(re.findall(r'(\w+)="([^"]*)"', line)) == labels:
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no sample {name}{labels}")


def test_ever_new_queries_for_the_same_empty_result_end_with_no_progress_before_the_clients_cap(
    proxy, upstream, log_records
):
    upstream.judge = no_progress_judge
    upstream.script(*[searching(n) for n in range(STALLED_RUN)], Json(chat_completion(SUMMARY)))

    responses, _ = run_agent(proxy, nothing_found, "stalled")

    last = responses[-1]
    assert last.headers["x-loopwarden-terminated"] == "no_progress"
    assert summary_of(last.parse().choices[0].message.content) == SUMMARY
    assert len(responses) < CLIENT_CAP
    assert len(responses) == 5
    assert [is_progress_question(r.json()) for r in upstream.judge_requests] == [True, True]  # at 3 and 4 results
    nudge = next(r.json()["messages"] for r in upstream.requests if "Not run:" in r.body.decode())
    assert nudge[-1]["role"] == "tool"
    assert "same result" in nudge[-1]["content"]
    interventions = [r.fields for r in log_records if r.getMessage() == "intervention"]
    assert [(i["kind"], i["reason"]) for i in interventions] == [
        ("stalled_progress_nudge", "judge: every query came back empty (strike 1 of 2)")
    ]
    metrics = httpx.get(f"{proxy.metrics_url}/metrics").text
    labels = {"policy": "default", "tenant": "default"}
    assert (
        sample(
            metrics, "loopwarden_interventions_total", guard="stalled_progress", kind="stalled_progress_nudge", **labels
        )
        == 1.0
    )
    assert sample(metrics, "loopwarden_terminations_total", reason="no_progress", **labels) == 1.0


def test_without_the_judge_a_stall_is_nudged_and_the_run_goes_on(make_proxy, upstream, write_policies):
    proxy = make_proxy(policies_dir=str(write_policies(default="judge: {use_llm_judge: false}\n")))
    upstream.script(*[searching(n) for n in range(6)], Json(chat_completion("Lyon had about 100,000 people.")))

    responses, _ = run_agent(proxy, nothing_found, "stalled-no-judge")

    assert [r.headers["x-loopwarden-interventions"] for r in responses] == [
        "none",
        "none",
        "none",
        "stalled_progress_nudge",
        "none",
        "none",
    ]
    assert "x-loopwarden-terminated" not in responses[-1].headers
    assert responses[-1].parse().choices[0].message.content == "Lyon had about 100,000 people."
    assert upstream.judge_requests == []


def test_a_run_of_distinct_lookups_is_never_disturbed(proxy, upstream):
    """Nine searches, nine different answers, and a judge that would call anything stalled: never asked."""
    upstream.judge = no_progress_judge
    upstream.script(*[searching(n) for n in range(9)], Json(chat_completion("Lyon: about 110,000 in 1800.")))
    figures = iter(range(100_000, 200_000, 1_237))

    responses, messages = run_agent(proxy, lambda a: f"{a['q']}: {next(figures)} inhabitants (census)", "lookups")

    assert len(responses) == 10
    assert all(r.headers["x-loopwarden-interventions"] == "none" for r in responses)
    assert "x-loopwarden-terminated" not in responses[-1].headers
    assert len(upstream.requests) == 10  # no extra attempt, no nudge
    assert not any(is_progress_question(r.json()) for r in upstream.judge_requests)  # only the answer is judged
    assert sum(1 for m in messages if m["role"] == "tool") == 9


def test_smolagents_observations_stall_and_end_through_final_answer(proxy, upstream):
    """smolagents sends its calls as text and its results as ``Observation:`` user turns:
    the stall is read from those, and the ending arrives as its ``final_answer`` call."""
    from smolagents import OpenAIServerModel, ToolCallingAgent, tool

    @tool
    def search(q: str) -> str:
        """Search the web.

        Args:
            q: what to look for
        """
        return f"No results for '{q}'."

    upstream.judge = no_progress_judge
    upstream.script(*[searching(n) for n in range(STALLED_RUN)], Json(chat_completion(SUMMARY)))
    model = OpenAIServerModel(
        model_id="m",
        api_base=proxy.base_url,
        api_key="sk-p",
        client_kwargs={"max_retries": 0, "default_headers": {"X-Session-Id": "smol-stalled"}},
    )
    agent = ToolCallingAgent(tools=[search], model=model, max_steps=5, verbosity_level=0)  # its low end

    assert summary_of(agent.run(TASK)) == SUMMARY
    assert sum(is_progress_question(r.json()) for r in upstream.judge_requests) == 2
    sent = upstream.requests[-2].json()["messages"]
    observations = [m for m in sent if m["role"] == "user" and "Observation:" in json.dumps(m["content"])]
    assert len(observations) >= 4
