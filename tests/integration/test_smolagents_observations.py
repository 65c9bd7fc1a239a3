"""smolagents flattens tool results into user turns (``Observation:``): every guard reads them
as tool results, the failing-tools breaker too. Driven with a real smolagents ToolCallingAgent
over real HTTP."""

from __future__ import annotations

import httpx
import pytest

from tests.support.fake_upstream import Json, chat_completion, tool_call

smolagents = pytest.importorskip("smolagents")

AUTH = {"Authorization": "Bearer sk-p"}


def _agent(proxy, session: str, tool, max_steps: int = 8):
    model = smolagents.OpenAIServerModel(
        model_id="m",
        api_base=proxy.base_url,
        api_key="sk-p",
        client_kwargs={"default_headers": {"X-Session-Id": session}, "max_retries": 0},
    )
    return smolagents.ToolCallingAgent(tools=[tool], model=model, max_steps=max_steps, verbosity_level=0)


def _searches(count: int) -> list[Json]:
    calls = [tool_call("search", f'{{"query": "lyon population, try {n}"}}', f"c{n}") for n in range(count)]
    return [Json(chat_completion(None, tool_calls=[call])) for call in calls]


def _session(proxy, session: str) -> dict:
    return httpx.get(f"{proxy.base_url}/loopwarden/sessions/{session}", headers=AUTH).json()


def test_failing_tools_seen_as_observation_turns_trip_the_breaker(proxy, upstream):
    ran: list[str] = []

    @smolagents.tool
    def search(query: str) -> str:
        """Search the web.

        Args:
            query: What to look for.
        """
        ran.append(query)
        return "Error: upstream search returned 503"

    upstream.script(*_searches(10), Json(chat_completion("The search tool is down.")))

    _agent(proxy, "smol-failing", search).run("How many people live in Lyon?")

    assert _session(proxy, "smol-failing")["termination"] == "tool_failures"
    assert len(ran) == 3  # the breaker's max_consecutive: no fourth failing call reached the agent


def test_distinct_successful_observations_are_never_disturbed(proxy, upstream):
    @smolagents.tool
    def search(query: str) -> str:
        """Search the web.

        Args:
            query: What to look for.
        """
        return f"Page about {query}: nothing conclusive."

    final = tool_call("final_answer", '{"answer": "About 522,000."}', "done")
    upstream.script(*_searches(4), Json(chat_completion(None, tool_calls=[final])))

    answer = _agent(proxy, "smol-fine", search).run("How many people live in Lyon?")

    assert answer == "About 522,000."
    assert _session(proxy, "smol-fine")["termination"] is None


def test_identical_observations_end_with_no_progress(proxy, upstream):
    @smolagents.tool
    def search(query: str) -> str:
        """Search the web.

        Args:
            query: What to look for.
        """
        return "status: pending"

    upstream.script(*_searches(10), Json(chat_completion("Still pending.")))

    _agent(proxy, "smol-stalled", search).run("Is the Lyon census out?")

    assert _session(proxy, "smol-stalled")["termination"] == "no_progress"
