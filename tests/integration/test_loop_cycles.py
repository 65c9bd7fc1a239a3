"""Cycles of calls end after as many tool runs as an exact repeat, before common client caps
(the OpenAI Agents SDK's turn cap, LangGraph's recursion limit): the openai SDK running a
hand-written agent against a model stuck in a cycle."""

from __future__ import annotations

import asyncio

import openai
import pytest

from tests.integration.test_loop_guards import answer, calling, fresh_results, run_agent, sdk
from tests.support.assertions import summary_of

SEARCH = ("search", {"q": "lyon"})
FETCH = ("fetch", {"url": "https://insee.fr/lyon"})
READ = ("fetch", {"url": "https://fr.wikipedia.org/wiki/Lyon"})


def _tool_runs(messages) -> int:
    return sum(1 for m in messages if m.get("role") == "tool")


@pytest.mark.parametrize(
    "replies",
    [
        # what the model answers, request by request; a warned request is asked again and
        # the model insists (the same call twice in a row); after the 5th, the summary
        [SEARCH, SEARCH, SEARCH, SEARCH, SEARCH, SEARCH, SEARCH],  # requests 3 and 4 warned
        [SEARCH, FETCH, SEARCH, SEARCH, FETCH, FETCH, SEARCH],  # A-B-A-B: the same
        [SEARCH, FETCH, READ, SEARCH, SEARCH, FETCH],  # A-B-C-A-B: warned at its first repeat
    ],
    ids=["repeat", "period-2", "period-3"],
)
def test_a_cycle_ends_gracefully_after_four_tool_runs_like_an_exact_repeat(proxy, upstream, replies):
    upstream.script(*[calling(*call, f"c{n}") for n, call in enumerate(replies)], answer("Lyon: about 522,000."))

    turns, last, messages = run_agent(sdk(proxy), fresh_results(), session=f"cycle-{len(set(map(str, replies)))}")

    assert last.headers["x-loopwarden-terminated"] == "loop"
    assert _tool_runs(messages) == 4  # loop.block_at - 1, whatever the period
    assert turns == 5  # within a client cap of 5 requests
    assert summary_of(last.parse().choices[0].message.content) == "Lyon: about 522,000."
    assert upstream.pending == 0  # every warning came where the script expected it


def test_alternating_tools_with_new_arguments_are_never_disturbed(proxy, upstream):
    pages = [
        calling("search", {"q": f"lyon {n}"}, f"c{n}")
        if n % 2
        else calling("fetch", {"url": f"https://x/{n}"}, f"c{n}")
        for n in range(12)
    ]
    upstream.script(*pages, answer("Found it."))

    turns, last, _ = run_agent(sdk(proxy), fresh_results(), session="alternating-new")

    assert turns == 13
    assert "x-loopwarden-terminated" not in last.headers
    assert last.parse().choices[0].message.content == "Found it."
    assert len(upstream.requests) == 13  # no warning, no extra call


def test_the_openai_agents_sdk_gets_the_ending_within_a_turn_cap_of_five(proxy, upstream):
    from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled

    set_tracing_disabled(True)
    ran: list[str] = []

    @function_tool
    def search(q: str) -> str:
        """Search the web."""
        ran.append(f"search {q}")
        return f"results for {q}"

    @function_tool
    def fetch(url: str) -> str:
        """Fetch a page."""
        ran.append(f"fetch {url}")
        return f"the page at {url}"

    replies = [SEARCH, FETCH, SEARCH, SEARCH, FETCH, FETCH, SEARCH]  # A-B-A-B, warned twice, insisting
    upstream.script(*[calling(*call, f"c{n}") for n, call in enumerate(replies)], answer("Lyon: about 522,000."))
    client = openai.AsyncOpenAI(base_url=proxy.base_url, api_key="sk-p", max_retries=0)
    agent: Agent[None] = Agent(
        name="research", model=OpenAIChatCompletionsModel(model="m", openai_client=client), tools=[search, fetch]
    )

    result = asyncio.run(Runner.run(agent, "How many people live in Lyon?", max_turns=5))

    assert summary_of(result.final_output) == "Lyon: about 522,000."  # the ending, not MaxTurnsExceeded
    assert len(ran) == 4
