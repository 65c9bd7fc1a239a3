"""Loop endings reach clients capped at the low end of what people set (issue 31, item 4).

The OpenAI Agents SDK with ``max_turns`` 5 and 6, LangGraph's ``create_react_agent`` with a
``recursion_limit`` allowing 5 and 6 model calls, smolagents with ``max_steps`` 5, streamed and
not, against a model stuck in each of the loops of docs/judgment/loops-and-failures.md: each
run ends with the proxy's graceful ending (its notice, then the model's summary), never with
the framework's own cap error.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest

from tests.support.assertions import summary_of
from tests.support.capped_agents import SUMMARY, LoopingModel, Tool, run_capped
from tests.support.fake_upstream import is_progress_question, verdict
from tests.support.turns import Call

pytestmark = pytest.mark.shared_proxy

CLIENTS = {"agents-max_turns-5": ("agents", 5), "agents-max_turns-6": ("agents", 6)} | {
    "langgraph-5-model-calls": ("langgraph", 5),
    "langgraph-6-model-calls": ("langgraph", 6),
    "smolagents-max_steps-5": ("smolagents", 5),
}
clients = pytest.mark.parametrize("client", list(CLIENTS))
streams = pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])


def research_tools(result: Callable[[str, str], str]) -> list[Tool]:
    """``search`` and ``fetch``, answering ``result(tool, argument)``."""

    def search(q: str) -> str:
        """Search the web.

        Args:
            q: what to look for
        """
        return result("search", q)

    def fetch(url: str) -> str:
        """Fetch a web page.

        Args:
            url: the page's address
        """
        return result("fetch", url)

    return [search, fetch]


def fresh_results() -> Callable[[str, str], str]:
    """Every call answers something new: only the loop guard can see the loop."""
    counter = itertools.count()
    return lambda tool, argument: f"{tool} {argument}: reading #{next(counter)}, {next(counter) * 1237} inhabitants"


def run_ends_with(client: str, proxy, session: str, tools: list[Tool], stream: bool, reason: str) -> None:
    answer = run_capped(*CLIENTS[client], proxy.base_url, f"{session}-{client}-{stream}", tools, stream=stream)

    text = str(answer)
    assert text.startswith(f"LoopWarden stopped this run ({reason})"), text
    assert summary_of(text) == SUMMARY


@clients
@streams
def test_an_exact_repeat_reaches_the_capped_client_as_the_loop_ending(proxy, upstream, client, stream):
    upstream.model = LoopingModel(lambda n: Call("search", {"q": "lyon population"}))

    run_ends_with(client, proxy, "repeat", research_tools(fresh_results()), stream, "loop")


@clients
@streams
def test_an_a_b_a_b_cycle_reaches_the_capped_client_as_the_loop_ending(proxy, upstream, client, stream):
    cycle = (Call("search", {"q": "lyon population"}), Call("fetch", {"url": "https://insee.fr/lyon"}))
    upstream.model = LoopingModel(lambda n: cycle[n % 2])

    run_ends_with(client, proxy, "cycle", research_tools(fresh_results()), stream, "loop")


@clients
@streams
def test_ever_new_arguments_with_identical_results_reach_the_capped_client_as_no_progress(
    proxy, upstream, client, stream
):
    upstream.model = LoopingModel(lambda n: Call("search", {"q": f"lyon population, try {n}"}))

    run_ends_with(client, proxy, "identical", research_tools(lambda tool, q: "No results."), stream, "no_progress")


def stalled_judge(request: dict[str, Any]) -> Any:
    """Finds every run of steps stalled (and every final answer done)."""
    return verdict(request, not is_progress_question(request), "every query came back empty")


@clients
@streams
def test_a_stalled_run_reaches_the_capped_client_as_no_progress(proxy, upstream, client, stream):
    """New queries, results that differ only by the query they echo: the judge says no twice."""
    upstream.judge = stalled_judge
    upstream.model = LoopingModel(lambda n: Call("search", {"q": f"lyon 1800 census {n}"}))

    run_ends_with(
        client, proxy, "stalled", research_tools(lambda tool, q: f"No results for '{q}'."), stream, "no_progress"
    )
